#!/usr/bin/env bash
# Storage per agent step, per relation (heap, indexes and TOAST), without page
# granularity or fixed costs: the peers runner's sequential conversation is run twice on
# a fresh schema, with K1 and K2 steps, and each relation's size difference is divided
# by K2 - K1. Also prints the message bytes per step (pg_column_size of the new messages)
# and the target (messages + 1,024 B). Each run is on a database of its own
# (dropped and created again).
#   PROJECT=/path/to/tree DB=dbname [K1=200] [K2=1200] bench/scripts/storage.sh
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PROJECT=${PROJECT:-$(cd "$HERE/../.." && pwd)}; DB=${DB:-bench_helix}
K1=${K1:-200}; K2=${K2:-1200}
T=${TMPDIR:-/tmp}
export PGPASSWORD=postgres
P="psql -h 127.0.0.1 -U postgres -qtA -F |"
# The message bytes of both layouts (helix.messages_k from migration 00029 on:
# counted when the table exists, so the script measures older trees too).
msgbytes() {
	local keyed=0
	[ "$($P -c "select to_regclass('helix.messages_k') is not null" "$DB")" = t ] &&
		keyed="(select coalesce(sum(pg_column_size(m.message)), 0) from helix.messages_k m)"
	$P -c "select (select coalesce(sum(pg_column_size(m.message)), 0) from helix.messages m) + $keyed" "$DB"
}
sizes() {
	local msgs; msgs=$(msgbytes)
	$P -c "select n.nspname||'.'||c.relname, pg_total_relation_size(c.oid), $msgs
		from pg_class c join pg_namespace n on n.oid = c.relnamespace
		where n.nspname in ('helix', 'dbos') and c.relkind = 'r'" "$DB"
}
fresh() { $P -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" postgres; }  # a run on what an earlier one left would not measure
fresh
PROJECT=$PROJECT DB=$DB "$HERE/peers-helix.sh" -seqK "$K1" -concN 0 -hitlN 0 >/dev/null || true  # -hitlN 0 ends in a panic of the summary, after the work
sizes > "$T/storage-$DB-1"
fresh
PROJECT=$PROJECT DB=$DB "$HERE/peers-helix.sh" -seqK "$K2" -concN 0 -hitlN 0 >/dev/null || true
sizes > "$T/storage-$DB-2"
python3 - "$T/storage-$DB-1" "$T/storage-$DB-2" "$((K2 - K1))" <<'PY'
import sys
def load(p):
    rows = [l.split('|') for l in open(p).read().split('\n') if l]
    return {r[0]: int(r[1]) for r in rows}, int(rows[0][2])
a, ma = load(sys.argv[1]); b, mb = load(sys.argv[2]); k = int(sys.argv[3])
tot = 0
for rel in sorted(b, key=lambda r: -(b[r] - a.get(r, 0))):
    d = (b[rel] - a.get(rel, 0)) / k
    tot += d
    if abs(d) >= 1:
        print(f"{rel:40s} {d:8.0f} B/step")
msg = (mb - ma) / k
print(f"{'total':40s} {tot:8.0f} B/step; messages {msg:.0f} B/step; target {msg + 1024:.0f}; over by {tot - msg - 1024:.0f}")
PY
