#!/usr/bin/env bash
# stress.sh hunts flaky tests: it runs the README's test command
# (scripts/test.sh) N times with the race detector on an otherwise quiet
# machine, then N times more while CPU burners keep every core busy, and
# prints for each test that ever failed how often (per mode) and the output
# of its first failure (internal/stresssum).
#
#   scripts/stress.sh                 # 5 quiet + 5 loaded runs of every test
#   scripts/stress.sh -n 2            # 2 + 2
#   scripts/stress.sh -n 3 -- -run TestCompanion   # go test flags after --
#
# Options: -n RUNS (default 5, env STRESS_RUNS), -b BURNERS (busy processes
# in the loaded runs, default one per core, env STRESS_BURNERS), -o DIR
# (where each run's log and events go, default a new /tmp/helix-stress.*
# directory). The exit status is 0 only if every run passed.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${STRESS_RUNS:-5}
burners=${STRESS_BURNERS:-$(nproc)}
out=""
while getopts "n:b:o:h" opt; do
  case $opt in
    n) runs=$OPTARG ;;
    b) burners=$OPTARG ;;
    o) out=$OPTARG ;;
    h) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "stress: unknown option (see scripts/stress.sh -h)" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
case $runs in ''|*[!0-9]*|0) echo "stress: -n wants a positive number of runs, got '$runs'" >&2; exit 2 ;; esac
case $burners in ''|*[!0-9]*|0) echo "stress: -b wants a positive number of burners, got '$burners'" >&2; exit 2 ;; esac
if [ -z "$out" ]; then out=$(mktemp -d /tmp/helix-stress.XXXXXX); fi
mkdir -p "$out"

burner_pids=()
stop_burners() {
  if [ ${#burner_pids[@]} -gt 0 ]; then
    kill "${burner_pids[@]}" 2>/dev/null || true
    wait "${burner_pids[@]}" 2>/dev/null || true
  fi
  burner_pids=()
}
trap stop_burners EXIT
# Interrupted: stop the burners and the run in progress, then exit.
trap 'stop_burners; kill 0 2>/dev/null; exit 130' INT TERM

# Build the summariser before the runs, so a broken tree fails fast.
go build -o "$out/stresssum" ./internal/stresssum

total=$((2 * runs))
i=0
t0=$SECONDS
for mode in quiet load; do
  if [ "$mode" = load ]; then
    for _ in $(seq "$burners"); do
      # A busy loop in its own process: one core's worth of load each.
      bash -c 'while :; do :; done' &
      burner_pids+=($!)
    done
  fi
  for n in $(seq "$runs"); do
    i=$((i + 1))
    name="$mode-$n"
    start=$SECONDS
    printf '==> stress: run %d/%d (%s%s) ... ' "$i" "$total" "$name" \
      "$([ "$mode" = load ] && echo ", $burners CPU burners")" >&2
    status=0
    HELIX_TEST_JSONFILE="$out/$name.json" scripts/test.sh -race "$@" >"$out/$name.log" 2>&1 || status=$?
    if [ "$status" = 0 ]; then verdict=ok; else verdict="FAILED (exit $status)"; fi
    printf '%s in %ss (elapsed %ss; log %s)\n' "$verdict" "$((SECONDS - start))" "$((SECONDS - t0))" "$out/$name.log" >&2
    # A run that broke before any test ran still counts, as a failure.
    if [ ! -s "$out/$name.json" ] && [ "$status" != 0 ]; then
      printf '{"Action":"output","Package":"scripts/test.sh","Output":"exit %s before any test event; see %s\\n"}\n{"Action":"fail","Package":"scripts/test.sh"}\n' \
        "$status" "$out/$name.log" >"$out/$name.json"
    fi
  done
  stop_burners
done

echo >&2
files=()
for mode in quiet load; do for n in $(seq "$runs"); do files+=("$out/$mode-$n.json"); done; done
"$out/stresssum" "${files[@]}"
