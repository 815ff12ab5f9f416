package workflows

import (
	"context"
	"errors"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/steps"
)

// A step whose only call is a transactional tool's (no other tool, no
// sub-agent or companion, no call that waits for a person, no finishWith
// tool after it) runs that call in the step's commit transaction: BEGIN
// (at the tool's isolation level), the held stream appends, the tool, the
// commit's statements, then the call's record and the commit's in one
// COMMIT. The step costs the commits of a step with a plain tool (the
// model call's record and the commit), where a call in a transaction of
// its own (runTxTool) costs one more, plus one for the step's start
// chunks written before it.
//
// The call's record commits with the commit's, so a crash anywhere before
// that COMMIT leaves neither (a replay runs the call again, its writes
// rolled back) and one after it both. The call settles without its writes
// when it fails (an error, a panic, its timeout, an aborted transaction) or
// conflicts helix.TxToolAttempts times: its result is then final, and the
// commit goes on in a transaction of its own that records it (callSettled).

// txCall is a step's transactional call waiting to run in the step's
// commit transaction (joinCommit).
type txCall struct {
	id   int
	call helix.ToolCall
	iso  pgx.TxIsoLevel
	// run runs the call on tx.
	run func(ctx context.Context, tx pgx.Tx) (steps.ToolResult, error)
	// dst is where the call's result goes, for the commit's body to read.
	dst *steps.ToolResult
	// started is when the call first ran.
	started time.Time
	// settled is set once the call's result (*dst) is final without its
	// writes: later attempts record it and run nothing.
	settled   bool
	conflicts []error
}

// joinsCommit reports whether the step's calls run as one transactional
// call in the step's commit transaction (see txCall).
func (t *turn) joinsCommit(calls []helix.ToolCall, p stepPlan) bool {
	if len(p.phase1) != 1 || len(p.subs) > 0 || len(p.comps) > 0 || len(p.pending) > 0 || t.txTool(calls[p.phase1[0]]) == nil {
		return false
	}
	_, phase2, _ := t.classify(calls)
	return len(phase2) == 0
}

// joinCommit makes in's call (a transactional tool's) the journal's next
// step, run in the next transaction step's transaction (the step's
// commit, which must be the journal's next write), with its result stored
// at dst; a replay stores the recorded result at once.
func (t *turn) joinCommit(in steps.ToolInput, dst *steps.ToolResult) error {
	id := t.j.reserve()
	if r, ok, err := t.j.recorded(id, steps.NameRunTool); ok || err != nil {
		if err != nil {
			return err
		}
		*dst, err = decode[steps.ToolResult](r)
		return err
	}
	t.j.call = &txCall{id: id, call: in.Call, iso: t.txTool(in.Call).TxIsolation(), dst: dst,
		run: func(ctx context.Context, tx pgx.Tx) (steps.ToolResult, error) {
			in := in
			in.Tx = tx
			return fenced(t, t.env.RunTool(in))(ctx)
		}}
	return nil
}

// beginCall begins tx at the isolation level of the journal's call, when
// it is to run.
func (j *journal) beginCall(ctx context.Context, tx *jtx) error {
	if j.call == nil || j.call.settled {
		return nil
	}
	ptx, err := tx.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: j.call.iso})
	if err != nil {
		return err
	}
	tx.begun, tx.call = true, ptx
	return nil
}

// errCallSettled ends an attempt whose call settled without its writes.
var errCallSettled = errors.New("workflows: the transactional call settled without its writes")

// runCall runs the journal's call in tx (begun by beginCall), unless it
// settled, and returns its record. A call that settles in it returns
// errCallSettled.
func (j *journal) runCall(ctx dbos.Context, tx *jtx) (journalRecord, error) {
	l := j.call
	if !l.settled {
		if l.started.IsZero() {
			l.started = time.Now()
		}
		res, err := l.run(stepContext{j.traced(ctx)}, callTx{Tx: tx.call, t: tx})
		if err == nil && tx.conn.Conn().PgConn().TxStatus() == 'E' {
			err = abortedCall(l.call, res)
		}
		var rolledBack *steps.TxRolledBackError
		switch {
		case errors.As(err, &rolledBack):
			*l.dst, l.settled = rolledBack.Result, true
			return journalRecord{}, errCallSettled
		case err != nil:
			// A conflict (counted by callSettled) or the
			// infrastructure's error: the attempt ends.
			return journalRecord{}, err
		}
		*l.dst = res
	}
	return encode(l.id, steps.NameRunTool, *l.dst, nil, l.started)
}

// callSettled reports whether err, an attempt's, ended it because the
// journal's call settled without its writes, the attempt to be run again
// without it: the call failed, or err is its transaction's
// helix.TxToolAttempts-th conflict (a serialization failure or a
// deadlock, the call's or the commit's statements': both run at the
// tool's isolation level).
func (j *journal) callSettled(err error) bool {
	l := j.call
	switch {
	case errors.Is(err, errCallSettled):
		return true
	case l == nil || l.settled || !steps.RetriesTx(err):
		return false
	}
	l.conflicts = append(l.conflicts, err)
	if len(l.conflicts) < helix.TxToolAttempts {
		return false // the journal's retry runs it again, on a fresh transaction
	}
	*l.dst, l.settled = conflictedCall(l.call, l.conflicts, l.started), true
	return true
}

// callTx is the transaction a call that joins the step's commit runs in:
// pgx's (begun by beginCall), whose statements go out after the journal's
// held writes (the step's start chunks), in one round trip with the first
// of them. Large objects go out before the held writes (they touch no
// stream).
type callTx struct {
	pgx.Tx
	t *jtx
}

func (x callTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return x.t.Exec(ctx, sql, args...)
}

func (x callTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return x.t.Query(ctx, sql, args...)
}

func (x callTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return x.t.QueryRow(ctx, sql, args...)
}

func (x callTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := x.t.flush(ctx); err != nil {
		return failedBatch{err}
	}
	return x.Tx.SendBatch(ctx, b)
}

func (x callTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := x.t.flush(ctx); err != nil {
		return 0, err
	}
	return x.Tx.CopyFrom(ctx, table, columns, src)
}

func (x callTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := x.t.flush(ctx); err != nil {
		return nil, err
	}
	return x.Tx.Prepare(ctx, name, sql)
}

func (x callTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := x.t.flush(ctx); err != nil {
		return nil, err
	}
	return x.Tx.Begin(ctx)
}

// failedBatch is the results of a batch that could not be sent.
type failedBatch struct{ err error }

func (b failedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b failedBatch) Query() (pgx.Rows, error)         { return failedRows{b.err}, b.err }
func (b failedBatch) QueryRow() pgx.Row                { return failedRows{b.err} }
func (b failedBatch) Close() error                     { return b.err }
func (b failedBatch) Tx() pgx.Tx                       { return nil }

// failedRows are the rows of a query that could not be sent.
type failedRows struct{ err error }

func (r failedRows) Close()                                       {}
func (r failedRows) Err() error                                   { return r.err }
func (r failedRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r failedRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (r failedRows) Next() bool                                   { return false }
func (r failedRows) Scan(...any) error                            { return r.err }
func (r failedRows) Values() ([]any, error)                       { return nil, r.err }
func (r failedRows) RawValues() [][]byte                          { return nil }
func (r failedRows) Conn() *pgx.Conn                              { return nil }
func (r failedRows) TypeMap() *pgtype.Map                         { return nil }
