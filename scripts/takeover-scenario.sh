#!/usr/bin/env bash
# The operator scenario of cluster takeover, with the CLI as written and the
# default lease (30 s): `serve` A starts a publisher session that waits for an
# approval; A is SIGKILLed and never comes back; `serve` B (another, default
# executor ID) runs; `helix-dbos approve` gives the approval; the script
# prints how long after the kill the session completed, and doctor's view.
# It runs twice: A dead on this machine (B sees its pid is gone: takeover at
# once), and A made to look like a process of another machine (its row's
# host rewritten: takeover once its lease expired).
#
#   HELIX_DATABASE_URL=postgres://user:pw@127.0.0.1:5432/empty_db scripts/takeover-scenario.sh
#
# Needs psql and curl. Uses ports 18081 and 18082 on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${HELIX_DATABASE_URL:?set HELIX_DATABASE_URL to a database the script may use}"
export HELIX_DATABASE_URL
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
go build -o "$dir/helix-dbos" ./cmd/helix-dbos
bin=$dir/helix-dbos
now() { date +%s.%N; }
serve() { # $1: port, $2: log
  "$bin" serve --agents examples/agents.yaml --allow-unauthenticated --addr "127.0.0.1:$1" > "$2" 2>&1 &
  until grep -q "listening on" "$2"; do sleep 0.1; done
}
scenario() { # $1: 1 when A is made to look like a process of another machine
  serve 18081 "$dir/a.log"
  local a=$! sid="post-$1-$RANDOM" call idA t0 t1
  curl -sf -XPOST 127.0.0.1:18081/start -H 'Content-Type: application/json' \
    -d "{\"agentType\":\"publisher\",\"message\":\"Write a post\",\"sessionId\":\"$sid\"}" > /dev/null
  until call=$(psql "$HELIX_DATABASE_URL" -Atc "SELECT key FROM helix.sessions, jsonb_each(pending_client_tool_calls) WHERE session_id = '$sid'") && [ -n "$call" ]; do sleep 0.2; done
  kill -9 "$a"; wait "$a" 2>/dev/null || true
  t0=$(now)
  if [ "$1" = 1 ]; then
    idA=$(grep -o "(executor [^)]*)" "$dir/a.log" | head -1 | sed 's/(executor //; s/)//')
    psql "$HELIX_DATABASE_URL" -qc "UPDATE helix.executors SET hostname = 'another-host', pid_namespace = 'another-machine' WHERE executor_id = '$idA'"
  fi
  serve 18082 "$dir/b.log"
  local b=$!
  "$bin" approve "$sid" "$call" > /dev/null
  until "$bin" sessions show "$sid" 2>/dev/null | grep -qi completed; do sleep 0.2; done
  t1=$(now)
  printf 'A %s: killed -> session completed in %.2f s\n' "$([ "$1" = 1 ] && echo 'on another machine' || echo 'on this machine')" "$(echo "$t1 - $t0" | bc)"
  "$bin" doctor | grep "executors alive" || true
  kill "$b"; wait "$b" 2>/dev/null || true
}
scenario 0
scenario 1
