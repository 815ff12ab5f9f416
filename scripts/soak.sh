#!/usr/bin/env bash
# The long chaos run (`make soak`): TestChaosWorkersDieAndSessionsComplete
# with many sessions spread over many minutes, while workers are killed every
# 2–5 s, frozen past their lease every 15 events and Postgres is restarted
# every 30. Provisions Postgres like scripts/test.sh.
#
#   scripts/soak.sh                      # 600 sessions over 10 minutes
#   SESSIONS=400 DURATION=20m scripts/soak.sh
#
# The figures (takeover times, kills, events, and the transactional tool's
# executions, rollbacks and repeated effects under "txTool") go to REPORT
# (default soak-report.json) and to the test's log; docs/reliability.md
# records them.
set -euo pipefail
cd "$(dirname "$0")/.."
export HELIX_CHAOS_SESSIONS=${SESSIONS:-600}
export HELIX_CHAOS_DURATION=${DURATION:-10m}
export HELIX_CHAOS_REPORT=${REPORT:-$PWD/soak-report.json}
export HELIX_CHAOS_PG_RESTART=${PG_RESTART:-1}
export HELIX_TEST_PACKAGES=./integration
echo "soak: $HELIX_CHAOS_SESSIONS sessions over $HELIX_CHAOS_DURATION; report in $HELIX_CHAOS_REPORT" >&2
exec scripts/test.sh -run '^TestChaos' -v -timeout 60m "$@"
