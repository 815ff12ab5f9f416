package bench

import (
	"context"
	"fmt"

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
