package postgres

import "context"

// TryAdvisoryLock takes the session-level advisory lock key on q's
// connection without waiting; ok is false when another session holds it.
// The lock is held until AdvisoryUnlock on the same connection, or until
// that connection closes: run both on one connection taken from the pool
// (a *pgxpool.Conn through PgxQuerier), never on the pool itself.
func TryAdvisoryLock(ctx context.Context, q Querier, key int64) (ok bool, err error) {
	err = q.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&ok)
	return ok, err
}

// AdvisoryUnlock releases the advisory lock key that TryAdvisoryLock took
// on q's connection.
func AdvisoryUnlock(ctx context.Context, q Querier, key int64) error {
	_, err := q.Exec(ctx, `SELECT pg_advisory_unlock($1)`, key)
	return err
}
