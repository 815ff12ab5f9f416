package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Querier is the SQL surface the store runs its session methods on: the
// store's pool by default, or a caller's transaction through
// [Store.WithQuerier]. Adapt other drivers' transactions (for example a
// DBOS transaction) to it with a few lines; scanning follows pgx semantics.
type Querier interface {
	// Exec runs a statement and returns the number of rows it affected.
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) Row
}

// Rows is a result set (pgx.Rows satisfies it).
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Row is a single-row result (pgx.Row satisfies it).
type Row interface {
	Scan(dest ...any) error
}

// pgxQuerier is the subset of pgx shared by *pgxpool.Pool, *pgx.Conn and
// pgx.Tx.
type pgxQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PgxQuerier adapts a pgx pool, connection or transaction to [Querier].
func PgxQuerier(q interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) Querier {
	return pgxAdapter{q}
}

type pgxAdapter struct{ q pgxQuerier }

func (a pgxAdapter) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := a.q.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

func (a pgxAdapter) Query(ctx context.Context, sql string, args ...any) (Rows, error) {
	return a.q.Query(ctx, sql, args...)
}

func (a pgxAdapter) QueryRow(ctx context.Context, sql string, args ...any) Row {
	return a.q.QueryRow(ctx, sql, args...)
}

var _ pgxQuerier = (*pgxpool.Pool)(nil)
var _ pgxQuerier = (pgx.Tx)(nil)
