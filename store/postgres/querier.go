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

// Deferrer is a [Querier] that can hold statements whose results nobody
// reads (writes whose row counts do not matter) and send them with its next
// statement, in the same round trip. The error of a held statement is
// reported by that next statement (or by the transaction's commit). The
// store defers such writes when its querier is a Deferrer (a pipelined
// transaction: [Pipelined], or the step journal's transactions).
type Deferrer interface {
	Querier
	// Defer holds the statement until the next one.
	Defer(ctx context.Context, sql string, args ...any)
}

// execLater runs a write whose row count nobody reads: held for the next
// statement when q is a [Deferrer], at once otherwise.
func execLater(ctx context.Context, q Querier, sql string, args ...any) error {
	if d, ok := q.(Deferrer); ok {
		d.Defer(ctx, sql, args...)
		return nil
	}
	_, err := q.Exec(ctx, sql, args...)
	return err
}

// BatchQuerier is the part of pgx a [Pipelined] transaction runs on (a
// pgx.Tx or a *pgx.Conn or *pgxpool.Conn inside a transaction).
type BatchQuerier interface {
	pgxQuerier
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Pipelined is a [Deferrer] on a pgx transaction: the statements it holds
// go out in one batch with the next statement. Call Flush before using the
// transaction directly (or committing it) after store methods ran on it.
type Pipelined struct {
	q    BatchQuerier
	held []heldStatement
}

type heldStatement struct {
	sql  string
	args []any
	scan func(pgx.Row) error // nil: the result is not read
}

// NewPipelined returns a pipelined view of tx.
func NewPipelined(tx BatchQuerier) *Pipelined { return &Pipelined{q: tx} }

var _ Deferrer = (*Pipelined)(nil)

// Defer implements [Deferrer].
func (p *Pipelined) Defer(_ context.Context, sql string, args ...any) {
	p.held = append(p.held, heldStatement{sql: sql, args: args})
}

// DeferRow holds a statement that returns one row, as Defer does, and
// calls scan with that row when the statement has gone out (with the
// statement Defer's statements go out with); an error of scan is that
// statement's error.
func (p *Pipelined) DeferRow(sql string, scan func(pgx.Row) error, args ...any) {
	p.held = append(p.held, heldStatement{sql: sql, args: args, scan: scan})
}

// readResults reads the results of the first n statements of b from br,
// calling the callbacks of those queued with one; at the first error it
// closes br and returns that error.
func readResults(br pgx.BatchResults, b *pgx.Batch, n int) error {
	for i := range n {
		var err error
		if fn := b.QueuedQueries[i].Fn; fn != nil {
			err = fn(br) // a statement held with DeferRow, or queued with a callback
		} else {
			_, err = br.Exec()
		}
		if err != nil {
			_ = br.Close()
			return err
		}
	}
	return nil
}

// SendCommit sends b, a batch whose last statements are a COMMIT and
// then after statements that run once it committed, each a transaction of
// its own (after a failed statement Postgres skips the rest of the
// batch). err is the transaction's: the first error of a statement up to
// the COMMIT. afterErr is the first error of an after statement, whose
// transaction then committed all the same.
func SendCommit(ctx context.Context, q interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}, b *pgx.Batch, after int) (afterErr, err error) {
	br := q.SendBatch(ctx, b)
	if err := readResults(br, b, b.Len()-after); err != nil {
		return nil, err
	}
	for range after {
		if _, aerr := br.Exec(); aerr != nil && afterErr == nil {
			afterErr = aerr
		}
	}
	if cerr := br.Close(); cerr != nil && afterErr == nil {
		afterErr = cerr
	}
	return afterErr, nil
}

// batch returns a batch of the held statements (nil when none) and forgets
// them.
func (p *Pipelined) batch() *pgx.Batch {
	if len(p.held) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, h := range p.held {
		q := b.Queue(h.sql, h.args...)
		if h.scan != nil {
			q.QueryRow(h.scan)
		}
	}
	p.held = nil
	return b
}

// Flush sends the held statements.
func (p *Pipelined) Flush(ctx context.Context) error {
	if b := p.batch(); b != nil {
		return p.q.SendBatch(ctx, b).Close()
	}
	return nil
}

// Exec implements [Querier].
func (p *Pipelined) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	b := p.batch()
	if b == nil {
		tag, err := p.q.Exec(ctx, sql, args...)
		return tag.RowsAffected(), err
	}
	var n int64
	b.Queue(sql, args...).Exec(func(tag pgconn.CommandTag) error { n = tag.RowsAffected(); return nil })
	return n, p.q.SendBatch(ctx, b).Close()
}

// Query implements [Querier].
func (p *Pipelined) Query(ctx context.Context, sql string, args ...any) (Rows, error) {
	b := p.batch()
	if b == nil {
		return p.q.Query(ctx, sql, args...)
	}
	return QueryAfter(ctx, p.q, b, sql, args...)
}

// QueryAfter sends the statements of b and then the query, in one round
// trip, and returns the query's rows (closing them ends the batch). An
// error of a statement of b is returned, or reported by the rows.
func QueryAfter(ctx context.Context, q interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}, b *pgx.Batch, sql string, args ...any) (pgx.Rows, error) {
	n := b.Len()
	b.Queue(sql, args...)
	br := q.SendBatch(ctx, b)
	if err := readResults(br, b, n); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// batchRows are a batch's last query's rows; Close ends the batch.
type batchRows struct {
	pgx.Rows
	br  pgx.BatchResults
	err error
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if err := r.br.Close(); err != nil && r.err == nil {
		r.err = err
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// QueryRow implements [Querier].
func (p *Pipelined) QueryRow(ctx context.Context, sql string, args ...any) Row {
	b := p.batch()
	if b == nil {
		return p.q.QueryRow(ctx, sql, args...)
	}
	return QueryRowAfter(ctx, p.q, b, sql, args...)
}

// QueryRowAfter returns a query for one row that goes out, when scanned,
// after the statements of b, in one round trip.
func QueryRowAfter(ctx context.Context, q interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}, b *pgx.Batch, sql string, args ...any) pgx.Row {
	return batchRow{q: q, ctx: ctx, b: b, sql: sql, args: args}
}

// batchRow is QueryRowAfter's row.
type batchRow struct {
	q interface {
		SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	}
	ctx  context.Context
	b    *pgx.Batch
	sql  string
	args []any
}

func (r batchRow) Scan(dest ...any) error {
	r.b.Queue(r.sql, r.args...).QueryRow(func(row pgx.Row) error { return row.Scan(dest...) })
	return r.q.SendBatch(r.ctx, r.b).Close()
}
