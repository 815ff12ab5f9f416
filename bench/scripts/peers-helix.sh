#!/usr/bin/env bash
# Runs the helix runner of the peers benchmark (../shared/peers/helix/main.go, the
# project's sibling checkout) alone, built against a tree, on a database of its own.
#   PROJECT=/path/to/tree DB=dbname bench/scripts/peers-helix.sh [runner flags, e.g. -seqK 200 -concN 16 -concK 50 -hitlN 50]
# Prints the runner's RESULT lines (pipe them to bench/scripts/peers_summary.py).
# Each tree should use its own DB (default bench_helix) so parallel runs do not collide;
# Postgres at 127.0.0.1:5432, user postgres, password postgres (as scripts/pg.sh provisions).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PROJECT=${PROJECT:-$(cd "$HERE/../.." && pwd)}
PEERS=${PEERS:-$PROJECT/../shared/peers}
DB=${DB:-bench_helix}
W=${TMPDIR:-/tmp}/helix-peers-build-$DB; BIN=${TMPDIR:-/tmp}/helix-peers-bin-$DB
export PGPASSWORD=postgres
PSQL="psql -h 127.0.0.1 -U postgres -v ON_ERROR_STOP=1 -qtA"
[ "$($PSQL -c "select 1 from pg_database where datname='$DB'" postgres)" = 1 ] || $PSQL -c "CREATE DATABASE $DB" postgres
rm -rf $W; mkdir -p $W; cp "$PEERS/helix/main.go" $W/
cd $W
cat > go.mod <<MOD
module peers/helix

go $(cd "$PROJECT" && go mod edit -json | python3 -c 'import json,sys; print(json.load(sys.stdin)["Go"])')

require github.com/helix-agents/helix-dbos v0.0.0

replace github.com/helix-agents/helix-dbos => $PROJECT
MOD
cp "$PROJECT/go.sum" .
GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1
GOFLAGS=-mod=mod go build -o $BIN .
$PSQL -c 'DROP SCHEMA IF EXISTS helix CASCADE' -c 'DROP SCHEMA IF EXISTS dbos CASCADE' $DB 2>/dev/null
HELIX_BENCH_URL="postgres://postgres:postgres@127.0.0.1:5432/$DB" $BIN "$@" 2>${TMPDIR:-/tmp}/helix-peers-err-$DB | grep '^RESULT'
