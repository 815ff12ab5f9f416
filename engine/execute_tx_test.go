package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// tableCounts counts the rows of every table of the helix and dbos schemas.
func tableCounts(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT table_schema || '.' || table_name FROM information_schema.tables
		WHERE table_schema IN ('helix', 'dbos') AND table_type = 'BASE TABLE' ORDER BY 1`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, tables)
	out := map[string]int{}
	for _, tbl := range tables {
		var n int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM `+tbl).Scan(&n))
		out[tbl] = n
	}
	return out
}

// awaitDone waits for the committed pending run's result on e.
func awaitDone(t *testing.T, e *engine.Engine, p *engine.PendingRun) helix.AgentResult {
	t.Helper()
	h, err := p.Handle(t.Context(), e)
	require.NoError(t, err)
	return result(t, h)
}

func TestExecuteTxRollbackLeavesNoRow(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	agent := &helix.Agent{Name: "triage", Model: script(text("on it"))}
	e := newEngineOn(t, url, agent)
	app := appPool(t, url)
	before := tableCounts(t, app)

	tx, err := app.Begin(t.Context())
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), `INSERT INTO tickets VALUES ('t-1', 'rolled-back')`)
	require.NoError(t, err)
	p, err := e.ExecuteTx(t.Context(), tx, agent, engine.Input{Message: "printer on fire"}, &engine.ExecuteOptions{SessionID: "rolled-back"})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(t.Context()))

	require.Equal(t, before, tableCounts(t, app), "a rolled-back ExecuteTx leaves no row in any helix or dbos table")
	_, err = p.Handle(t.Context(), e)
	require.ErrorIs(t, err, helix.ErrNotFound)
	_, err = e.Session(t.Context(), "rolled-back")
	require.ErrorIs(t, err, helix.ErrNotFound)
}

func TestExecuteTxCommitStartsTheRunAndContinues(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	agent := &helix.Agent{Name: "triage", Model: script(text("first answer"), text("second answer"))}
	e := newEngineOn(t, url, agent)
	app := appPool(t, url)

	tx, err := app.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
	_, err = tx.Exec(t.Context(), `INSERT INTO tickets VALUES ('t-1', 'ticket-1')`)
	require.NoError(t, err)
	p, err := e.ExecuteTx(t.Context(), tx, agent, engine.Input{Message: "printer on fire"}, &engine.ExecuteOptions{SessionID: "ticket-1"})
	require.NoError(t, err)
	require.Equal(t, "ticket-1", p.SessionID)
	// Before the commit the run exists only in tx: no engine sees it.
	_, err = p.Handle(t.Context(), e)
	require.ErrorIs(t, err, helix.ErrNotFound)
	var status string
	require.NoError(t, tx.QueryRow(t.Context(), `SELECT status FROM helix.runs WHERE run_id = $1`, p.RunID).Scan(&status))
	require.Equal(t, "running", status, "the caller's transaction reads what ExecuteTx wrote")
	require.NoError(t, tx.Commit(t.Context()))

	res := awaitDone(t, e, p)
	require.Equal(t, helix.AgentCompleted, res.Status)
	require.JSONEq(t, `"first answer"`, string(res.Output))

	// The completed session's next turn, in another transaction.
	tx2, err := app.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx2.Rollback(context.WithoutCancel(t.Context())) }()
	p2, err := e.ExecuteTx(t.Context(), tx2, agent, engine.Input{Message: "still on fire"}, &engine.ExecuteOptions{SessionID: "ticket-1"})
	require.NoError(t, err)
	require.NoError(t, tx2.Commit(t.Context()))
	res = awaitDone(t, e, p2)
	require.Equal(t, helix.AgentCompleted, res.Status)
	require.JSONEq(t, `"second answer"`, string(res.Output))
	require.Equal(t, p.SessionID, p2.SessionID)
	require.NotEqual(t, p.RunID, p2.RunID)
}

// A client (no engine, no agent registered) records the run; an engine that
// registers the agent and was not running at the commit (the announcement
// reached no engine that could start it) starts it when it launches.
func TestClientExecuteTxRunStartsOnAnEngineLaunchedLater(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	agent := &helix.Agent{Name: "triage", Model: script(text("done"))}
	// An engine of another agent: it hears the announcement and leaves the
	// run alone (its Launch also migrated the database for the client).
	other := &helix.Agent{Name: "billing", Model: script(text("no"))}
	newEngineWith(t, engine.Config{DatabaseURL: url, RecordedRunSweepInterval: 50 * time.Millisecond}, other)
	c, err := engine.NewClient(t.Context(), engine.ClientConfig{DatabaseURL: url})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	app := appPool(t, url)

	_, err = c.ExecuteTx(t.Context(), nil, &helix.Agent{Name: "no model"}, engine.Input{Message: "x"}, nil)
	var def *helix.DefinitionError
	require.ErrorAs(t, err, &def, "the client validates the agent as Register does")

	tx, err := app.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
	p, err := c.ExecuteTx(t.Context(), tx, agent, engine.Input{Message: "hello"}, &engine.ExecuteOptions{UserID: "u-1"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(t.Context()))

	st, err := c.Session(t.Context(), p.SessionID)
	require.NoError(t, err)
	require.Equal(t, "u-1", st.UserID)
	var started bool
	require.NoError(t, app.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM dbos.workflow_status WHERE workflow_uuid = $1)`, p.WorkflowID).Scan(&started))
	require.False(t, started, "no engine that registers the agent runs: nothing started it")

	e := newEngineOn(t, url, agent)
	res := awaitDone(t, e, p)
	require.Equal(t, helix.AgentCompleted, res.Status)
}

// A run recorded and never started, with no announcement (its process died
// between Execute's commit and its start), is started by a live engine's
// periodic sweep.
func TestRecordedRunSweepStartsAnUnannouncedRun(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	agent := &helix.Agent{Name: "triage", Model: script(text("swept"))}
	e := newEngineWith(t, engine.Config{DatabaseURL: url, RecordedRunSweepInterval: 100 * time.Millisecond}, agent)
	p, err := engine.RecordUnstarted(t.Context(), e, agent, engine.Input{Message: "hello"}, nil)
	require.NoError(t, err)
	res := awaitDone(t, e, p)
	require.Equal(t, helix.AgentCompleted, res.Status)
	require.JSONEq(t, `"swept"`, string(res.Output))
}

// Two transactions create the same session ID: the second waits for the
// first, then is refused with AgentAlreadyRunningError and its own
// transaction goes on and commits its own row.
func TestExecuteTxSameNewSessionIDTwiceIsOneSession(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	agent := &helix.Agent{Name: "triage", Model: script(text("once"))}
	e := newEngineOn(t, url, agent)
	app := appPool(t, url)
	opts := &engine.ExecuteOptions{SessionID: "dup"}

	tx1, err := app.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx1.Rollback(context.WithoutCancel(t.Context())) }()
	p1, err := e.ExecuteTx(t.Context(), tx1, agent, engine.Input{Message: "first"}, opts)
	require.NoError(t, err)

	tx2, err := app.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx2.Rollback(context.WithoutCancel(t.Context())) }()
	var pid2 int
	require.NoError(t, tx2.QueryRow(t.Context(), `SELECT pg_backend_pid()`).Scan(&pid2))
	_, err = tx2.Exec(t.Context(), `INSERT INTO tickets VALUES ('t-2', 'dup')`)
	require.NoError(t, err)
	second := make(chan error, 1)
	go func() {
		_, err := e.ExecuteTx(context.WithoutCancel(t.Context()), tx2, agent, engine.Input{Message: "second"}, opts)
		second <- err
	}()
	// tx2 waits on tx1's session row (its unique-index entry).
	require.Eventually(t, func() bool {
		var waiting bool
		err := app.QueryRow(t.Context(), `SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1`, pid2).Scan(&waiting)
		return err == nil && waiting
	}, 10*time.Second, 10*time.Millisecond, "the second ExecuteTx waits for the first transaction")
	require.NoError(t, tx1.Commit(t.Context()))

	err = <-second
	var running *helix.AgentAlreadyRunningError
	require.ErrorAs(t, err, &running)
	require.Equal(t, "dup", running.SessionID)
	require.NoError(t, tx2.Commit(t.Context()), "the refusal leaves the caller's transaction usable")

	var ticket string
	require.NoError(t, app.QueryRow(t.Context(), `SELECT session_id FROM tickets WHERE id = 't-2'`).Scan(&ticket))
	require.Equal(t, "dup", ticket)
	res := awaitDone(t, e, p1)
	require.Equal(t, helix.AgentCompleted, res.Status)
	var sessions, runs, messages int
	require.NoError(t, app.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM helix.sessions WHERE session_id = 'dup'),
		(SELECT count(*) FROM helix.runs WHERE session_id = 'dup')`).Scan(&sessions, &runs))
	require.Equal(t, []int{1, 1}, []int{sessions, runs})
	for _, m := range allMessages(t, e, "dup") {
		if m.Role == helix.RoleUser {
			messages++
			require.Equal(t, "first", m.Content)
		}
	}
	require.Equal(t, 1, messages)
}

// A refusal, and an error of one of ExecuteTx's statements, roll back only
// what ExecuteTx wrote: the caller's transaction commits its own rows.
func TestExecuteTxRefusalLeavesTheTransactionUsable(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	agent := &helix.Agent{Name: "triage", Model: script(text("one"), text("two"))}
	e := newEngineOn(t, url, agent)
	app := appPool(t, url)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "hi"}, &engine.ExecuteOptions{SessionID: "s"})
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, h).Status)

	tx, err := app.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
	_, err = tx.Exec(t.Context(), `INSERT INTO tickets VALUES ('t-1', 's')`)
	require.NoError(t, err)

	// A refusal before any write: the options.
	_, err = e.ExecuteTx(t.Context(), tx, agent, engine.Input{Message: "x", State: []byte(`{}`)}, &engine.ExecuteOptions{SessionID: "s"})
	var refused *engine.RefusedError
	require.ErrorAs(t, err, &refused)
	require.Equal(t, engine.RefusedStateNotAllowed, refused.Code)

	// A statement that fails in the middle of ExecuteTx's writes: another
	// transaction holds the session's row, and tx gives up waiting for it.
	holder, err := app.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(context.WithoutCancel(t.Context())) }()
	_, err = holder.Exec(t.Context(), `SELECT 1 FROM helix.sessions WHERE session_id = 's' FOR UPDATE`)
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), `SET LOCAL lock_timeout = '200ms'`)
	require.NoError(t, err)
	_, err = e.ExecuteTx(t.Context(), tx, agent, engine.Input{Message: "again"}, &engine.ExecuteOptions{SessionID: "s"})
	require.Error(t, err)
	require.Contains(t, err.Error(), "lock timeout")
	require.NoError(t, holder.Rollback(t.Context()))

	_, err = tx.Exec(t.Context(), `INSERT INTO tickets VALUES ('t-2', 's')`)
	require.NoError(t, err, "the caller's transaction is not aborted")
	require.NoError(t, tx.Commit(t.Context()))

	var tickets, runs int
	require.NoError(t, app.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM tickets), (SELECT count(*) FROM helix.runs WHERE session_id = 's')`).Scan(&tickets, &runs))
	require.Equal(t, 2, tickets)
	require.Equal(t, 1, runs, "nothing of the failed calls was kept")
	st, err := e.Session(t.Context(), "s")
	require.NoError(t, err)
	require.Equal(t, helix.SessionCompleted, st.Status)
	require.Len(t, allMessages(t, e, "s"), 2)
}

// Two engines race to start the same recorded run (both hear its
// announcement and both sweep): one workflow runs it, once.
func TestExecuteTxTwoEnginesStartOneWorkflow(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	x := &executions{}
	agent := &helix.Agent{Name: "triage", Tools: []*helix.Tool{noteTool(x)},
		Model: script(calls(call("c1", "note", `{"text":"k"}`)), text("done"))}
	cfg := engine.Config{DatabaseURL: url, RecordedRunSweepInterval: 20 * time.Millisecond}
	e1 := newEngineWith(t, cfg, agent)
	newEngineWith(t, cfg, agent)
	app := appPool(t, url)
	for i := range 5 {
		tx, err := app.Begin(t.Context())
		require.NoError(t, err)
		p, err := e1.ExecuteTx(t.Context(), tx, agent, engine.Input{Message: "go"}, &engine.ExecuteOptions{SessionID: fmt.Sprintf("race-%d", i)})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(t.Context()))
		require.Equal(t, helix.AgentCompleted, awaitDone(t, e1, p).Status)
	}
	var workflows int
	require.NoError(t, app.QueryRow(t.Context(), `SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid LIKE 'race-%-turn-1'`).Scan(&workflows))
	require.Equal(t, 5, workflows)
	x.mu.Lock()
	defer x.mu.Unlock()
	require.Len(t, x.keys, 5)
	for key, n := range x.keys {
		require.Equal(t, 1, n, "tool call %s ran once", key)
	}
}

// A transaction on a database without helix's tables (the app's pool
// pointed elsewhere) gets errors that say so, from every call on the
// caller's transaction, and a nil transaction is refused.
func TestTxCallsOnAnotherDatabaseSayWhatIsWrong(t *testing.T) {
	t.Parallel()
	agent := &helix.Agent{Name: "triage", Model: script(text("on it"))}
	e := newEngineOn(t, pgtest.NewURL(t), agent)
	other, err := pgxpool.New(t.Context(), pgtest.NewEmptyURL(t))
	require.NoError(t, err)
	t.Cleanup(other.Close)
	const hint = "is the transaction on the engine's database?"
	calls := map[string]func(pgx.Tx) error{
		"ExecuteTx": func(tx pgx.Tx) error {
			_, err := e.ExecuteTx(t.Context(), tx, agent, engine.Input{Message: "hi"}, nil)
			return err
		},
		"SessionTx": func(tx pgx.Tx) error {
			_, err := e.SessionTx(t.Context(), tx, "s-1")
			return err
		},
		"PendingToolCallsTx": func(tx pgx.Tx) error {
			_, err := e.PendingToolCallsTx(t.Context(), tx, "s-1")
			return err
		},
		"SubmitToolResultTx": func(tx pgx.Tx) error {
			_, err := e.SubmitToolResultTx(t.Context(), tx, "s-1", helix.ToolSubmission{ToolCallID: "c-1",
				Kind: helix.SubmissionApprovalResponse, Approved: new(true)})
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			tx, err := other.Begin(t.Context())
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
			require.ErrorContains(t, call(tx), hint)
			require.ErrorContains(t, call(nil), "nil")
		})
	}
}
