package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"
)

// storageMark is the database's size and write position at one moment.
type storageMark struct {
	tables int64 // bytes of every table of schemas helix and dbos, with indexes and TOAST
	wal    int64 // WAL insert position, in bytes from 0/0
	xid    int64 // the transaction ID the mark's own query allocated
}

// markStorage reads the sizes of the helix and dbos tables, the WAL insert
// position and a new transaction ID, in one statement on pool (its own
// transaction: the ID it allocates is its own).
func markStorage(ctx context.Context, pool *pgxpool.Pool) (storageMark, error) {
	var m storageMark
	err := pool.QueryRow(ctx, `SELECT
		(SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname IN ('helix', 'dbos') AND c.relkind IN ('r', 'p'))::bigint,
		pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint,
		txid_current()`).Scan(&m.tables, &m.wal, &m.xid)
	if err != nil {
		return storageMark{}, fmt.Errorf("measure the storage: %w", err)
	}
	return m, nil
}

// messageBytes returns the stored size of the session's messages (their
// jsonb column, compressed when Postgres compresses it).
func (h *harness) messageBytes(ctx context.Context, sessionID string) (int64, error) {
	var n int64
	err := h.pool.QueryRow(ctx, `SELECT coalesce(sum(pg_column_size(m.message)), 0)::bigint
		FROM helix.sessions s JOIN helix.messages m ON m.session_key = s.key WHERE s.session_id = $1`,
		sessionID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("measure the messages of session %s: %w", sessionID, err)
	}
	return n, nil
}

// storage returns the growth from before to after, per step of a session
// of steps steps whose messages take messages bytes. The after mark's own
// transaction ID is not the session's: it is subtracted.
func storage(before, after storageMark, messages int64, steps int) Storage {
	if steps <= 0 {
		return Storage{}
	}
	per := func(n int64) float64 { return round3(float64(n) / float64(steps)) }
	return Storage{
		BytesPerStep:        per(after.tables - before.tables),
		WALBytesPerStep:     per(after.wal - before.wal),
		WriteXactsPerStep:   per(after.xid - before.xid - 1),
		MessageBytesPerStep: per(messages),
	}
}

// relationSizes is the size of every table of schemas helix and dbos, by
// name ("schema.table"), with its indexes'.
type relationSizes map[string]relationSize

type relationSize struct {
	rows, dead, heap, toast int64
	indexes                 map[string]int64
}

// readRelations reads the size of every helix and dbos table: the exact
// row count, the dead tuples Postgres counts (pg_stat_user_tables), the
// heap (main fork with its free space map and visibility map), TOAST and
// each index.
func readRelations(ctx context.Context, pool *pgxpool.Pool) (relationSizes, error) {
	rows, err := pool.Query(ctx, `SELECT n.nspname || '.' || c.relname, c.oid::regclass::text,
		pg_table_size(c.oid) - coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0),
		coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0), coalesce(st.n_dead_tup, 0)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace LEFT JOIN pg_stat_user_tables st ON st.relid = c.oid
		WHERE n.nspname IN ('helix', 'dbos') AND c.relkind IN ('r', 'p')`)
	if err != nil {
		return nil, fmt.Errorf("measure the tables: %w", err)
	}
	out := relationSizes{}
	reg := map[string]string{}
	for rows.Next() {
		var name, regname string
		var s relationSize
		if err := rows.Scan(&name, &regname, &s.heap, &s.toast, &s.dead); err != nil {
			rows.Close()
			return nil, fmt.Errorf("measure the tables: %w", err)
		}
		s.indexes = map[string]int64{}
		out[name], reg[name] = s, regname
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("measure the tables: %w", err)
	}
	for name, regname := range reg {
		s := out[name]
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+regname).Scan(&s.rows); err != nil {
			return nil, fmt.Errorf("count the rows of %s: %w", name, err)
		}
		ix, err := pool.Query(ctx, `SELECT n.nspname || '.' || c.relname, pg_relation_size(i.indexrelid)
			FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE i.indrelid = $1::regclass`, regname)
		if err != nil {
			return nil, fmt.Errorf("measure the indexes of %s: %w", name, err)
		}
		for ix.Next() {
			var iname string
			var n int64
			if err := ix.Scan(&iname, &n); err != nil {
				ix.Close()
				return nil, fmt.Errorf("measure the indexes of %s: %w", name, err)
			}
			s.indexes[iname] = n
		}
		ix.Close()
		if err := ix.Err(); err != nil {
			return nil, fmt.Errorf("measure the indexes of %s: %w", name, err)
		}
		out[name] = s
	}
	return out, nil
}

// relationGrowth is each table's growth from before to after, per session
// of n, largest first; tables that did not grow are left out.
func relationGrowth(before, after relationSizes, n int) []RelationGrowth {
	per := func(d int64) float64 { return round3(float64(d) / float64(n)) }
	var out []RelationGrowth
	for name, a := range after {
		b := before[name]
		g := RelationGrowth{Table: name, Rows: per(a.rows - b.rows), DeadRows: per(a.dead - b.dead),
			HeapBytes: per(a.heap - b.heap), ToastBytes: per(a.toast - b.toast)}
		var ix int64
		for iname, sz := range a.indexes {
			d := sz - b.indexes[iname]
			ix += d
			if d == 0 {
				continue
			}
			if g.Indexes == nil {
				g.Indexes = map[string]float64{}
			}
			g.Indexes[iname] = per(d)
		}
		g.IndexBytes = per(ix)
		g.Bytes = per(a.heap - b.heap + a.toast - b.toast + ix)
		if g.Bytes == 0 && g.Rows == 0 {
			continue
		}
		out = append(out, g)
	}
	slices.SortFunc(out, func(x, y RelationGrowth) int { return cmp.Compare(y.Bytes, x.Bytes) })
	return out
}
