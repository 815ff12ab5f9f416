#!/usr/bin/env bash
# WAL per relation and record type, per step, for the helix runner's sequential phase
# (200 steps + 100 warm-up steps), counting only records of database $DB, so other
# activity on the cluster does not pollute it.
# usage: PROJECT=/path/to/tree DB=dbname bench/scripts/walattr.sh
# WAL is kept by a temporary physical replication slot until pg_waldump has read it.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PROJECT=${PROJECT:-$(cd "$HERE/../.." && pwd)}; DB=${DB:-bench_helix}
T=${TMPDIR:-/tmp}
export PGPASSWORD=postgres
P="psql -h 127.0.0.1 -U postgres -qtA"
PROJECT=$PROJECT DB=$DB "$HERE/peers-helix.sh" -seqK 3 -concN 0 -hitlN 0 >/dev/null 2>&1  # build + schema
BIN=$T/helix-peers-bin-$DB
OID=$($P -c "select oid from pg_database where datname='$DB'" postgres)
$P -c "select pg_drop_replication_slot('walattr_$DB') from pg_replication_slots where slot_name='walattr_$DB'" postgres >/dev/null
$P -c "select pg_create_physical_replication_slot('walattr_$DB', true)" postgres >/dev/null  # keeps the WAL until dumped
S=$($P -c "select pg_current_wal_insert_lsn()" postgres)
HELIX_BENCH_URL="postgres://postgres:postgres@127.0.0.1:5432/$DB" $BIN -seqK 200 -concN 0 -hitlN 0 2>/dev/null | grep ^RESULT | python3 "$HERE/peers_summary.py"
E=$($P -c "select pg_current_wal_insert_lsn()" postgres)
$P -F' ' -c "select c.relfilenode, n.nspname||'.'||c.relname from pg_class c join pg_namespace n on n.oid=c.relnamespace where n.nspname in ('helix','dbos')" $DB > $T/walattr-rels-$DB
/usr/lib/postgresql/15/bin/pg_waldump -p /var/lib/postgresql/15/main/pg_wal -s $S -e $E 2>/dev/null > $T/walattr-wal-$DB.txt || true
$P -c "select pg_drop_replication_slot('walattr_$DB')" postgres >/dev/null
python3 - 300 "$OID" $T/walattr-rels-$DB $T/walattr-wal-$DB.txt <<'PY'
import re,collections,sys
steps=int(sys.argv[1]); oid=sys.argv[2]
rels=dict(l.split(' ',1) for l in open(sys.argv[3]).read().split('\n') if l)
tot=collections.Counter(); cnt=collections.Counter(); rt=collections.Counter(); rec=collections.Counter()
for l in open(sys.argv[4]):
    m=re.search(r'len \(rec/tot\):\s*(\d+)/\s*(\d+)',l)
    if not m: continue
    r=re.search(r'rel \d+/(\d+)/(\d+)',l)
    if r and r.group(1)!=oid: continue
    if not r and 'Transaction' in l and False: continue
    rmgr=l.split()[1]
    d=re.search(r'desc: (\S+)',l); d=d.group(1) if d else '?'
    key=rels.get(r.group(2),'rel'+r.group(2)) if r else rmgr
    tot[key]+=int(m.group(2)); rec[key]+=int(m.group(1)); cnt[key]+=1; rt[(key,d)]+=int(m.group(2))
T=sum(v for k,v in tot.items() if k!='Transaction' and k!='Standby' and k!='XLOG' and k!='Heap2' or True)
for k,v in tot.most_common(25): print(f'{k:45s} {v/steps:8.0f} B/step {cnt[k]/steps:5.2f} recs')
print('total per step (relation records of this database + all Transaction/XLOG records; on a busy cluster the latter include others)',round(T/steps))
print('relation records of this database only', round(sum(v for k,v in tot.items() if not k[0].isupper())/steps))
print('same without full-page images', round(sum(v for k,v in rec.items() if not k[0].isupper())/steps))
for k,v in rt.most_common(30): print(f'   {k[0]:40s} {k[1]:15s} {v/steps:7.0f}')
PY
