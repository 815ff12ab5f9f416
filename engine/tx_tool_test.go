package engine_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

type entry struct {
	ID string
}

// ledger reads the app's ledger ids in order.
func ledger(t *testing.T, url string) []string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.WithoutCancel(t.Context())) }()
	rows, err := conn.Query(t.Context(), `SELECT id FROM ledger ORDER BY id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

func createLedger(t *testing.T, url string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.WithoutCancel(t.Context())) }()
	_, err = conn.Exec(t.Context(), `CREATE TABLE ledger (id text PRIMARY KEY, note text);
		CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL); INSERT INTO counter VALUES (1, 0)`)
	require.NoError(t, err)
}

// A step with four parallel transactional calls: the two that succeed
// commit their rows, their state change and their events with their
// records; the one that fails after writing (and emitting) leaves no row
// and no event, and the model sees its error; so does the one that
// ignored a failed statement and returned a result its aborted
// transaction cannot commit.
func TestTxToolWritesCommitWithTheRecord(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	createLedger(t, url)
	e, h := runBookkeeper(t, url,
		calls(call("c1", "book", `{"ID":"a"}`), call("c2", "refuse", `{"ID":"c"}`), call("c3", "book", `{"ID":"b"}`),
			call("c4", "sloppy", `{"ID":"d"}`)),
		text("booked"),
	)

	require.Equal(t, []string{"a", "b"}, ledger(t, url), "the refused call's row was rolled back")
	got := toolResults(t, e, h.SessionID)
	require.Equal(t, `"booked a"`, got["c1"])
	require.Equal(t, `"booked b"`, got["c3"])
	require.Contains(t, got["c2"], "no funds")
	require.Contains(t, got["c4"], "left its transaction aborted")
	st, err := e.Session(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.JSONEq(t, `{"a":1,"b":1}`, string(st.CustomState))
	var events []string
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for c, err := range h.Stream(ctx) {
		require.NoError(t, err)
		if ev, ok := c.Chunk.(*helix.CustomEventChunk); ok {
			events = append(events, string(ev.Data))
		}
	}
	require.ElementsMatch(t, []string{`"a"`, `"b"`}, events, "the refused call's event was rolled back with it")
}

// runBookkeeper runs a session of an agent with the model's steps and
// three transactional tools, book (writes its ledger row, emits its ID
// and sets it in the state), refuse (writes and emits, then fails) and
// sloppy (writes, then ignores a failed statement, at REPEATABLE READ),
// and waits for it to complete.
func runBookkeeper(t *testing.T, url string, steps ...func(helix.ModelRequest, helix.StreamCallbacks) (helix.StepResult, error)) (*engine.Engine, *engine.Handle) {
	t.Helper()
	book := helix.MustNewTxTool("book", "Book an entry", func(ctx context.Context, tx pgx.Tx, in entry, tc helix.ToolContext) (string, error) {
		if _, err := tx.Exec(ctx, `INSERT INTO ledger (id) VALUES ($1)`, in.ID); err != nil {
			return "", err
		}
		if err := tc.Emit("booked", in.ID); err != nil {
			return "", err
		}
		if err := helix.UpdateState(tc, func(s *map[string]int) error { (*s)[in.ID] = 1; return nil }); err != nil {
			return "", err
		}
		return "booked " + in.ID, nil
	})
	refuse := helix.MustNewTxTool("refuse", "Book, then refuse", func(ctx context.Context, tx pgx.Tx, in entry, tc helix.ToolContext) (string, error) {
		if _, err := tx.Exec(ctx, `INSERT INTO ledger (id) VALUES ($1)`, in.ID); err != nil {
			return "", err
		}
		if err := tc.Emit("booked", in.ID); err != nil {
			return "", err
		}
		require.ErrorContains(t, tx.Commit(ctx), "does not commit or roll back")
		return "", errNoFunds
	})
	sloppy := helix.MustNewTxTool("sloppy", "Ignore a failed statement", func(ctx context.Context, tx pgx.Tx, in entry, tc helix.ToolContext) (string, error) {
		if _, err := tx.Exec(ctx, `INSERT INTO ledger (id) VALUES ($1)`, in.ID); err != nil {
			return "", err
		}
		_, _ = tx.Exec(ctx, `INSERT INTO ledger (id) VALUES (NULL)`) // fails, and the tool looks away
		return "fine", nil
	}, helix.TxIsolation(pgx.RepeatableRead))
	agent := &helix.Agent{Name: "bookkeeper", Tools: []*helix.Tool{book, refuse, sloppy}, InitialState: []byte(`{}`), Model: script(steps...)}
	e := newEngineOn(t, url, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "book"}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	return e, h
}

// racingBump is a SERIALIZABLE tool that increments the counter; its
// first two calls both read it before either writes (read counts them).
func racingBump(attempts *atomic.Int32, read *sync.WaitGroup) *helix.Tool {
	read.Add(2)
	return helix.MustNewTxTool("bump", "Increment the counter", func(ctx context.Context, tx pgx.Tx, _ struct{}, _ helix.ToolContext) (int, error) {
		first := attempts.Add(1) <= 2
		var n int
		if err := tx.QueryRow(ctx, `SELECT n FROM counter WHERE id = 1`).Scan(&n); err != nil {
			return 0, err
		}
		if first { // both first attempts read before either writes
			read.Done()
			read.Wait()
		}
		if _, err := tx.Exec(ctx, `UPDATE counter SET n = $1 WHERE id = 1`, n+1); err != nil {
			return 0, err
		}
		return n + 1, nil
	}, helix.TxIsolation(pgx.Serializable))
}

// requireRaced asserts that racingBump's two calls incremented the
// counter once each, one of them in a second transaction.
func requireRaced(t *testing.T, url string, attempts *atomic.Int32) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.WithoutCancel(t.Context())) }()
	var n int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT n FROM counter`).Scan(&n))
	require.Equal(t, 2, n, "each call incremented once")
	require.EqualValues(t, 3, attempts.Load(), "one of the two calls ran again")
}

var errNoFunds = &toolError{"no funds on this account"}

type toolError struct{ s string }

func (e *toolError) Error() string { return e.s }

// Two parallel calls that read and increment one counter under
// SERIALIZABLE, both after both read: one commits, the other fails with a
// serialization failure, runs again on a fresh transaction and commits.
// A call that always fails so gives up after helix.TxToolAttempts
// transactions, and the model sees the error.
func TestTxToolSerializationFailuresAreRetried(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	createLedger(t, url)
	var attempts, hopeless atomic.Int32
	var read sync.WaitGroup
	bump := racingBump(&attempts, &read)
	never := helix.MustNewTxTool("never", "Always a serialization failure", func(ctx context.Context, tx pgx.Tx, _ struct{}, _ helix.ToolContext) (int, error) {
		hopeless.Add(1)
		return 0, &pgconn.PgError{Code: "40001", Message: "could not serialize access (simulated)"}
	})
	agent := &helix.Agent{Name: "counter", Tools: []*helix.Tool{bump, never}, Model: script(
		calls(call("b1", "bump", `{}`), call("b2", "bump", `{}`)),
		calls(call("n1", "never", `{}`)),
		text("done"),
	)}
	e := newEngineOn(t, url, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "count"}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)

	requireRaced(t, url, &attempts)
	got := toolResults(t, e, h.SessionID)
	require.ElementsMatch(t, []string{"1", "2"}, []string{got["b1"], got["b2"]})
	require.EqualValues(t, helix.TxToolAttempts, hopeless.Load())
	require.Contains(t, got["n1"], "failed 5 times on a serialization failure or a deadlock")
}

// A transactional tool whose transaction loses its connection mid-call (a
// database restart, a failover: here its backend is terminated) did not
// fail: nothing of it committed, and the engine runs the call again on a
// fresh transaction. Its row is written once, and the model sees its
// result, not the connection's error.
func TestTxToolConnectionLostRunsTheCallAgain(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	createLedger(t, url)
	var attempts atomic.Int32
	book := helix.MustNewTxTool("book", "Book an entry", func(ctx context.Context, tx pgx.Tx, in entry, _ helix.ToolContext) (string, error) {
		if _, err := tx.Exec(ctx, `INSERT INTO ledger (id) VALUES ($1)`, in.ID); err != nil {
			return "", err
		}
		if attempts.Add(1) == 1 {
			// The first attempt's backend dies under it, as in a restart.
			_, err := tx.Exec(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
			require.Error(t, err, "the statement's own backend is terminated")
			return "", err
		}
		return "booked " + in.ID, nil
	})
	agent := &helix.Agent{Name: "booker", Tools: []*helix.Tool{book}, Model: script(
		calls(call("b1", "book", `{"ID":"x"}`)),
		text("done"),
	)}
	e := newEngineOn(t, url, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "book"}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.EqualValues(t, 2, attempts.Load(), "the call ran again after its connection was lost")
	require.Equal(t, []string{"x"}, ledger(t, url), "its row once: the lost attempt committed nothing")
	require.Equal(t, `"booked x"`, toolResults(t, e, h.SessionID)["b1"])
}

// A transactional tool that outlives its TxTimeout is cancelled: its
// write rolls back and the model sees the timeout.
func TestTxToolTimeout(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	createLedger(t, url)
	slow := helix.MustNewTxTool("slow", "Book, then take too long", func(ctx context.Context, tx pgx.Tx, in entry, _ helix.ToolContext) (string, error) {
		if _, err := tx.Exec(ctx, `INSERT INTO ledger (id) VALUES ($1)`, in.ID); err != nil {
			return "", err
		}
		_, err := tx.Exec(ctx, `SELECT pg_sleep(30)`)
		return "slept", err
	}, helix.TxTimeout(300*time.Millisecond))
	agent := &helix.Agent{Name: "sleeper", Tools: []*helix.Tool{slow}, Model: script(
		calls(call("s1", "slow", `{"ID":"x"}`)),
		text("done"),
	)}
	e := newEngineOn(t, url, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "sleep"}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.Empty(t, ledger(t, url))
	require.Contains(t, toolResults(t, e, h.SessionID)["s1"], "ran longer than its timeout of 300ms")
}

// An approval-gated transactional tool runs once it is approved, its row
// once.
func TestTxToolBehindAnApproval(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	createLedger(t, url)
	pay := helix.MustNewTxTool("pay", "Pay an entry", func(ctx context.Context, tx pgx.Tx, in entry, _ helix.ToolContext) (string, error) {
		_, err := tx.Exec(ctx, `INSERT INTO ledger (id) VALUES ($1)`, in.ID)
		return "paid " + in.ID, err
	}, helix.RequireApproval())
	agent := &helix.Agent{Name: "payer", Tools: []*helix.Tool{pay}, Model: script(
		calls(call("p1", "pay", `{"ID":"p"}`)),
		text("paid"),
	)}
	e := newEngineOn(t, url, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "pay"}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentSuspendedClientTool, res.Status, res.Error)
	require.Empty(t, ledger(t, url))
	_, err = e.SubmitToolResult(t.Context(), h.SessionID, helix.Approve("p1", "ok"))
	require.NoError(t, err)
	h, err = e.Resume(t.Context(), h.SessionID, nil)
	require.NoError(t, err)
	res = result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.Equal(t, []string{"p"}, ledger(t, url))
}

// A transactional tool of a sub-agent, called in parallel with the
// sub-agent by the lead: each row once. And a run interrupted while its
// transactional tool runs commits the call (its row once, its result in the
// transcript) and ends interrupted after the step; its resume does not run
// the tool again.
func TestTxToolInASubAgentAndUnderAnInterrupt(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	createLedger(t, url)
	book := helix.MustNewTxTool("book", "Book an entry", func(ctx context.Context, tx pgx.Tx, in entry, _ helix.ToolContext) (string, error) {
		_, err := tx.Exec(ctx, `INSERT INTO ledger (id) VALUES ($1)`, in.ID)
		return "booked " + in.ID, err
	})
	clerk := &helix.Agent{Name: "clerk", Description: "Books", Tools: []*helix.Tool{book}, OutputSchema: json.RawMessage(summarySchema),
		Model: script(calls(call("k1", "book", `{"ID":"sub"}`)), calls(call("fin", helix.FinishToolName, `{"summary":"booked"}`)))}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	slowBook := helix.MustNewTxTool("slow_book", "Book an entry, slowly", func(ctx context.Context, tx pgx.Tx, in entry, _ helix.ToolContext) (string, error) {
		if _, err := tx.Exec(ctx, `INSERT INTO ledger (id) VALUES ($1)`, in.ID); err != nil {
			return "", err
		}
		once.Do(func() { close(entered) })
		select {
		case <-release:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "booked " + in.ID, nil
	})
	lead := &helix.Agent{Name: "lead", Tools: []*helix.Tool{helix.MustSubAgentTool(clerk, nil, nil), book, slowBook}, Model: script(
		calls(call("s1", "subagent__clerk", `{"task":"book"}`), call("b1", "book", `{"ID":"lead"}`)),
		calls(call("w1", "slow_book", `{"ID":"slow"}`)),
		text("all booked"),
	)}
	e := newEngineOn(t, url, lead)
	h, err := e.Execute(t.Context(), lead, engine.Input{Message: "book"}, nil)
	require.NoError(t, err)
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the slow tool never ran")
	}
	require.NoError(t, e.Interrupt(t.Context(), h.SessionID, "stop"))
	close(release)
	res := result(t, h)
	require.Equal(t, helix.AgentInterrupted, res.Status, res.Error)
	require.Equal(t, []string{"lead", "slow", "sub"}, ledger(t, url))
	require.Equal(t, `"booked slow"`, toolResults(t, e, h.SessionID)["w1"])

	h, err = e.Resume(t.Context(), h.SessionID, nil)
	require.NoError(t, err)
	res = result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.Equal(t, []string{"lead", "slow", "sub"}, ledger(t, url), "the resume ran no tool again")
}

// Steps whose only call is a transactional tool's run it in the step's
// commit transaction: the tool's row and the step's committed messages
// share a transaction ID, the stream shows each step's start, the tool's
// event and its end in that order, and a call that fails (an error after
// writing and emitting, or a swallowed failed statement) leaves no row and
// no event while the model sees its error and the run goes on.
func TestTxToolAloneJoinsTheStepCommit(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	createLedger(t, url)
	e, h := runBookkeeper(t, url,
		calls(call("c1", "book", `{"ID":"a"}`)),
		calls(call("c2", "refuse", `{"ID":"b"}`)),
		calls(call("c3", "sloppy", `{"ID":"c"}`)),
		calls(call("c4", "book", `{"ID":"d"}`)),
		text("booked"),
	)

	require.Equal(t, []string{"a", "d"}, ledger(t, url), "the failed calls' rows were rolled back")
	got := toolResults(t, e, h.SessionID)
	require.Equal(t, `"booked a"`, got["c1"])
	require.Contains(t, got["c2"], "no funds")
	require.Contains(t, got["c3"], "left its transaction aborted")
	require.Equal(t, `"booked d"`, got["c4"])
	st, err := e.Session(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.JSONEq(t, `{"a":1,"d":1}`, string(st.CustomState))

	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.WithoutCancel(t.Context())) }()
	for id, callID := range map[string]string{"a": "c1", "d": "c4"} {
		var row, message string
		require.NoError(t, conn.QueryRow(t.Context(), `SELECT xmin::text FROM ledger WHERE id = $1`, id).Scan(&row))
		require.NoError(t, conn.QueryRow(t.Context(), `SELECT m.xmin::text FROM helix.messages m
			JOIN helix.sessions s ON s.key = m.session_key
			WHERE s.session_id = $1 AND m.message->>'toolCallId' = $2`, h.SessionID, callID).Scan(&message))
		require.Equal(t, row, message, "call %s's row and the step's messages commit in one transaction", callID)
	}

	var trace []string
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for c, err := range h.Stream(ctx) {
		require.NoError(t, err)
		switch c := c.Chunk.(type) {
		case *helix.StepStartChunk:
			trace = append(trace, "step")
		case *helix.ToolStartChunk:
			trace = append(trace, "start "+c.ToolCallID)
		case *helix.CustomEventChunk:
			trace = append(trace, "event "+string(c.Data))
		case *helix.ToolEndChunk:
			trace = append(trace, "end "+c.ToolCallID)
		}
	}
	require.Equal(t, []string{
		"step", "start c1", `event "a"`, "end c1",
		"step", "start c2", "end c2",
		"step", "start c3", "end c3",
		"step", "start c4", `event "d"`, "end c4",
		"step",
	}, trace)
}

// Two sessions whose steps each make one SERIALIZABLE call (run in the
// step's commit transaction) read one counter before either writes: one
// step commits, the other's transaction fails on the conflict and runs
// again, call and commit, on a fresh transaction.
func TestTxToolAloneConflictRunsTheStepCommitAgain(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	createLedger(t, url)
	var attempts atomic.Int32
	var read sync.WaitGroup
	bump := racingBump(&attempts, &read)
	agent := &helix.Agent{Name: "counter", Tools: []*helix.Tool{bump}, Model: script(
		calls(call("b", "bump", `{}`)),
		text("done"),
	)}
	e := newEngineOn(t, url, agent)
	var hs []*engine.Handle
	for range 2 {
		h, err := e.Execute(t.Context(), agent, engine.Input{Message: "count"}, nil)
		require.NoError(t, err)
		hs = append(hs, h)
	}
	var got []string
	for _, h := range hs {
		res := result(t, h)
		require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
		got = append(got, toolResults(t, e, h.SessionID)["b"])
	}
	require.ElementsMatch(t, []string{"1", "2"}, got)
	requireRaced(t, url, &attempts)
}
