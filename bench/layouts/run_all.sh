#!/usr/bin/env bash
# Rebuild every layout from the live rows of session $S; then each layout's 1,000 steps replicated 10x (10,000 steps)
# into 1, 16 and 128 sessions written round-robin in time order; print per-step heap / index / total.
set -euo pipefail
S=${S:?set S to the session ID of the 1,001-step session (see README.md)}
DB=${DB:-h6}
export PGPASSWORD=${PGPASSWORD:-postgres}
P="psql -h ${PGHOST:-127.0.0.1} -U ${PGUSER:-postgres} -d $DB -q -v ON_ERROR_STOP=1"
cd "$(dirname "$0")"
$P -c "select set_config('h6.s','x',false)" -f 00_common.sql >/dev/null 2>&1
for f in 10_layouts.sql 20_f.sql 40_more.sql 50_interleave.sql; do $P -v S=$S -f $f >/dev/null 2>&1; done
L=${L:-"lay_a lay_b lay_c0 lay_c1 lay_c1m lay_d lay_e lay_f1 lay_f2 lay_f3 lay_f4 lay_g1 lay_g2 lay_g3 lay_g4 lay_g5 lay_g6 lay_g7 lay_g8"}
for n in 1 16 128; do
  $P -c "select h6_mkmap($n, 10)" >/dev/null
  for l in $L; do $P -c "select h6_interleave('$l','${l}_x$n', 10)" >/dev/null 2>&1; done
done
arr=$(for l in $L; do printf "'%s'," $l; done); arr=${arr%,}
$P -c "
select s as layout, t.heap_per_step heap_1k, t.index_per_step idx_1k, t.total_per_step total_1k,
  a.heap heap_10k, a.idx idx_10k, a.total total_10k, b.total total_10k_16s, c.total total_10k_128s, greatest(a.total,b.total,c.total) - 1230 worst_gap
from unnest(array[$arr]) s, h6_total(s) t, h6_per(s||'_x1', 10000) a, h6_per(s||'_x16', 10000) b, h6_per(s||'_x128', 10000) c"
