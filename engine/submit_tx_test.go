package engine_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// audit writes the app's audit row in tx.
func audit(t *testing.T, tx pgx.Tx, note string) {
	t.Helper()
	_, err := tx.Exec(t.Context(), `INSERT INTO app_audit (note) VALUES ($1)`, note)
	require.NoError(t, err)
}

// audited returns the committed audit notes, in order.
func audited(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT note FROM app_audit ORDER BY id`)
	require.NoError(t, err)
	notes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return notes
}

// waitingForApproval starts payer and returns its run, suspended on the
// approval of t1, and t1's pending entry.
func waitingForApproval(t *testing.T, e *engine.Engine, agent *helix.Agent) (*engine.Handle, string) {
	t.Helper()
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "pay bob"}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentSuspendedClientTool, res.Status, res.Error)
	require.Equal(t, []string{"t1"}, res.Suspended.ToolCallIDs)
	pending, err := e.PendingToolCalls(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.NotEmpty(t, pending[0].WorkflowID)
	return h, pending[0].WorkflowID
}

// messagesTo counts the committed DBOS messages to a workflow.
func messagesTo(t *testing.T, pool *pgxpool.Pool, workflowID string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM dbos.notifications WHERE destination_uuid = $1`, workflowID).Scan(&n))
	return n
}

// refusalCode returns the code of a *helix.SubmissionError.
func refusalCode(t *testing.T, err error) string {
	t.Helper()
	var se *helix.SubmissionError
	require.ErrorAs(t, err, &se)
	return se.Code
}

// requireUnanswered asserts that t1 still waits, with no submission
// recorded, and that its run is still suspended.
func requireUnanswered(t *testing.T, e *engine.Engine, h *engine.Handle) {
	t.Helper()
	pending, err := e.PendingToolCalls(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Nil(t, pending[0].Submission, "no submission recorded")
	run, err := e.RunInfo(t.Context(), h.RunID)
	require.NoError(t, err)
	require.Equal(t, helix.RunSuspendedClientTool, run.Status)
}

// An approval written with the app's audit row in one transaction, on the
// pool the engine shares with the app: invisible to everyone else (no
// submission, no message to the run) until the caller commits, visible to
// the caller's own reads; at commit the run wakes and the tool runs once.
// Answering again: SubmitToolResult reports it already completed, the Tx
// variant refuses it so that the app's write rolls back.
func TestSubmitToolResultTxDeliversAtCommit(t *testing.T) {
	t.Parallel()
	var runs sync.Map
	agent := payer(&runs)
	url := pgtest.NewURL(t)
	pool := appPool(t, url)
	e := newEngineWith(t, engine.Config{Pool: pool}, agent)
	h, wf := waitingForApproval(t, e, agent)

	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
	audit(t, tx, "alice approved t1")
	res, err := e.SubmitToolResultTx(t.Context(), tx, h.SessionID, helix.Approve("t1", "ok"))
	require.NoError(t, err)
	require.False(t, res.AlreadyCompleted)
	require.Equal(t, h.RunID, res.RunID)
	require.Equal(t, h.SessionID, res.OwnerSessionID)
	require.Equal(t, "transfer", res.ToolName)
	require.Empty(t, res.Remaining)

	mine, err := e.PendingToolCallsTx(t.Context(), tx, h.SessionID)
	require.NoError(t, err)
	require.Len(t, mine, 1)
	require.NotNil(t, mine[0].Submission, "the caller's transaction reads its own answer")
	requireUnanswered(t, e, h)
	require.Zero(t, messagesTo(t, pool, wf), "no message to the run before the commit")
	require.Empty(t, audited(t, pool))

	require.NoError(t, tx.Commit(t.Context()))
	out := result(t, h)
	require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
	require.Equal(t, int32(1), executions2(&runs, "t1"), "approved at commit: the tool ran once")
	require.Equal(t, []string{"alice approved t1"}, audited(t, pool))

	again, err := e.SubmitToolResult(t.Context(), h.SessionID, helix.Approve("t1", "again"))
	require.NoError(t, err)
	require.True(t, again.AlreadyCompleted)
	tx2, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx2.Rollback(context.WithoutCancel(t.Context())) }()
	_, err = e.SubmitToolResultTx(t.Context(), tx2, h.SessionID, helix.Deny("t1", "too late"))
	require.Equal(t, helix.SubmissionAlreadyAnswered, refusalCode(t, err))
	require.ErrorIs(t, err, helix.ErrSubmissionRejected)
	require.Equal(t, int32(1), executions2(&runs, "t1"))
}

// A rolled-back transaction answered nothing: no submission, no message,
// the run still waits; a later SubmitToolResult is taken as the only
// answer (here a denial: the rolled-back approval never ran the tool). The
// transaction comes from a pool of the app's, not the engine's.
func TestSubmitToolResultTxRollbackDeliversNothing(t *testing.T) {
	t.Parallel()
	var runs sync.Map
	agent := payer(&runs)
	url := pgtest.NewURL(t)
	e := newEngineOn(t, url, agent)
	pool := appPool(t, url)
	h, wf := waitingForApproval(t, e, agent)

	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	audit(t, tx, "alice approved t1")
	_, err = e.SubmitToolResultTx(t.Context(), tx, h.SessionID, helix.Approve("t1", ""))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(t.Context()))

	requireUnanswered(t, e, h)
	require.Zero(t, messagesTo(t, pool, wf))
	require.Empty(t, audited(t, pool))
	require.Zero(t, executions2(&runs, "t1"))

	res, err := e.SubmitToolResult(t.Context(), h.SessionID, helix.Deny("t1", "changed my mind"))
	require.NoError(t, err)
	require.False(t, res.AlreadyCompleted, "the call still waited")
	out := result(t, h)
	require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
	require.Zero(t, executions2(&runs, "t1"), "the denial is the only answer delivered")
	msgs := allMessages(t, e, h.SessionID)
	require.Contains(t, msgs[2].Content, helix.NotApprovedMessage)
}

// A refusal rolls back only helix's savepoint: the caller's transaction
// stays usable, its own writes before and after the refusals commit, and
// a valid answer in the same transaction is delivered at its commit. (A
// Client, on a pool of the app's.)
func TestSubmitToolResultTxRefusalKeepsTheCallersTransaction(t *testing.T) {
	t.Parallel()
	var runs sync.Map
	agent := payer(&runs)
	url := pgtest.NewURL(t)
	e := newEngineOn(t, url, agent)
	pool := appPool(t, url)
	c, err := engine.NewClient(t.Context(), engine.ClientConfig{DatabaseURL: url})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	h, _ := waitingForApproval(t, e, agent)

	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
	audit(t, tx, "before")
	for _, tc := range []struct {
		sub  helix.ToolSubmission
		code string
	}{
		{helix.Approve("nope", ""), helix.SubmissionUnknownToolCall},
		{clientResult(t, "t1", answer{Answer: "x"}), helix.SubmissionKindMismatch},
		{helix.ToolSubmission{Kind: helix.SubmissionApprovalResponse, ToolCallID: "t1"}, helix.SubmissionInvalid},
	} {
		_, err := c.SubmitToolResultTx(t.Context(), tx, h.SessionID, tc.sub)
		require.Equal(t, tc.code, refusalCode(t, err))
		audit(t, tx, "after "+tc.code)
	}
	state, err := c.SessionTx(t.Context(), tx, h.SessionID)
	require.NoError(t, err)
	require.Nil(t, state.PendingClientToolCalls["t1"].Submission, "the refusals wrote nothing")
	require.False(t, conversationLocked(t, pool, h.SessionID), "a refusal releases the conversation's lock")
	_, err = c.SubmitToolResultTx(t.Context(), tx, h.SessionID, helix.Approve("t1", ""))
	require.NoError(t, err)
	require.True(t, conversationLocked(t, pool, h.SessionID), "an answer holds it until the caller's transaction ends")
	require.NoError(t, tx.Commit(t.Context()))

	require.Equal(t, []string{"before", "after unknown_tool_call", "after kind_mismatch", "after invalid_submission"}, audited(t, pool))
	out := result(t, h)
	require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
	require.Equal(t, int32(1), executions2(&runs, "t1"))
}

// conversationLocked reports whether a transaction holds the lock of the
// conversation (the root session's row), trying it from another
// connection without waiting.
func conversationLocked(t *testing.T, pool *pgxpool.Pool, rootSessionID string) bool {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
	_, err = tx.Exec(t.Context(), `SELECT 1 FROM helix.sessions WHERE session_id = $1 FOR UPDATE NOWAIT`, rootSessionID)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "55P03" { // lock_not_available
		return true
	}
	require.NoError(t, err)
	return false
}

// A statement of helix's that fails in the database (here the message to
// a workflow cancelled in the caller's own transaction, which the
// submission reports as a refusal) rolls back only helix's savepoint:
// nothing of the answer stays in the transaction, which goes on.
func TestSubmitToolResultTxFailedStatementKeepsTheCallersTransaction(t *testing.T) {
	t.Parallel()
	var runs sync.Map
	agent := payer(&runs)
	url := pgtest.NewURL(t)
	e := newEngineOn(t, url, agent)
	pool := appPool(t, url)
	h, wf := waitingForApproval(t, e, agent)

	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
	// What DBOS's CancelWorkflow writes, uncommitted: the engine's sweep
	// cannot see it, the submission's message statement does.
	_, err = tx.Exec(t.Context(), `UPDATE dbos.workflow_status SET status = 'CANCELLED' WHERE workflow_uuid = $1`, wf)
	require.NoError(t, err)
	_, err = e.SubmitToolResultTx(t.Context(), tx, h.SessionID, helix.Approve("t1", ""))
	require.Equal(t, helix.SubmissionNotWaiting, refusalCode(t, err))
	require.ErrorContains(t, err, "cancelled with DBOS's tools")
	audit(t, tx, "after the refusal")
	st, err := e.SessionTx(t.Context(), tx, h.SessionID)
	require.NoError(t, err)
	require.Nil(t, st.PendingClientToolCalls["t1"].Submission, "the submission's writes were rolled back with the savepoint")
	require.NoError(t, tx.Rollback(t.Context()))

	requireUnanswered(t, e, h)
	_, err = e.SubmitToolResult(t.Context(), h.SessionID, helix.Approve("t1", ""))
	require.NoError(t, err)
	out := result(t, h)
	require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
	require.Equal(t, int32(1), executions2(&runs, "t1"))
}

// Two transactions answer the same call: the second waits on the
// conversation's lock until the first ends. If the first commits, the
// second is refused with already_answered (and the app rolls its write
// back); if the first rolls back, the second's answer is the one
// delivered.
func TestSubmitToolResultTxConcurrentAnswers(t *testing.T) {
	t.Parallel()
	for _, firstCommits := range []bool{true, false} {
		name := map[bool]string{true: "first commits", false: "first rolls back"}[firstCommits]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var runs sync.Map
			agent := payer(&runs)
			url := pgtest.NewURL(t)
			e := newEngineOn(t, url, agent)
			pool := appPool(t, url)
			c, err := engine.NewClient(t.Context(), engine.ClientConfig{DatabaseURL: url})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, c.Close()) })
			h, _ := waitingForApproval(t, e, agent)

			first, err := pool.Begin(t.Context())
			require.NoError(t, err)
			defer func() { _ = first.Rollback(context.WithoutCancel(t.Context())) }()
			audit(t, first, "first approved")
			_, err = e.SubmitToolResultTx(t.Context(), first, h.SessionID, helix.Approve("t1", "first"))
			require.NoError(t, err)

			second, err := pool.Begin(t.Context())
			require.NoError(t, err)
			defer func() { _ = second.Rollback(context.WithoutCancel(t.Context())) }()
			audit(t, second, "second denied")
			done := make(chan error, 1)
			go func() {
				_, err := c.SubmitToolResultTx(t.Context(), second, h.SessionID, helix.Deny("t1", "second"))
				done <- err
			}()
			waiter, holder := second.Conn().PgConn().PID(), first.Conn().PgConn().PID()
			require.Eventually(t, func() bool {
				var blocked bool
				require.NoError(t, pool.QueryRow(t.Context(), `SELECT $2::int = ANY (pg_blocking_pids($1))`, waiter, holder).Scan(&blocked))
				return blocked
			}, 10*time.Second, 5*time.Millisecond, "the second answer waits for the first transaction's lock")
			select {
			case err := <-done:
				t.Fatalf("the second answer returned while the first transaction held the conversation: %v", err)
			default:
			}

			if firstCommits {
				require.NoError(t, first.Commit(t.Context()))
				err := <-done
				require.Equal(t, helix.SubmissionAlreadyAnswered, refusalCode(t, err))
				require.NoError(t, second.Rollback(t.Context()), "the app rolls its write back")
				out := result(t, h)
				require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
				require.Equal(t, int32(1), executions2(&runs, "t1"), "the first answer, an approval, stands")
				require.Equal(t, []string{"first approved"}, audited(t, pool))
				return
			}
			require.NoError(t, first.Rollback(t.Context()))
			require.NoError(t, <-done, "the first answer rolled back: the second one is taken")
			require.NoError(t, second.Commit(t.Context()))
			out := result(t, h)
			require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
			require.Zero(t, executions2(&runs, "t1"), "the second answer, a denial, is the one delivered")
			require.Equal(t, []string{"second denied"}, audited(t, pool))
		})
	}
}

// Under REPEATABLE READ the Tx reads see the transaction's snapshot: an
// answer another connection commits afterwards (and the run's progress
// after it) is not visible to them. Answering from that stale snapshot is
// a serialization failure (roll back and retry), not a refusal.
func TestPendingToolCallsTxReadsOneSnapshot(t *testing.T) {
	t.Parallel()
	var runs sync.Map
	agent := payer(&runs)
	url := pgtest.NewURL(t)
	e := newEngineOn(t, url, agent)
	pool := appPool(t, url)
	c, err := engine.NewClient(t.Context(), engine.ClientConfig{DatabaseURL: url})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	h, _ := waitingForApproval(t, e, agent)

	tx, err := pool.BeginTx(t.Context(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
	before, err := c.PendingToolCallsTx(t.Context(), tx, h.SessionID) // takes the snapshot
	require.NoError(t, err)
	require.Len(t, before, 1)
	require.Nil(t, before[0].Submission)

	_, err = c.SubmitToolResult(t.Context(), h.SessionID, helix.Approve("t1", ""))
	require.NoError(t, err)
	out := result(t, h)
	require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
	now, err := c.PendingToolCalls(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Empty(t, now, "committed: the call is answered and its step done")

	after, err := c.PendingToolCallsTx(t.Context(), tx, h.SessionID)
	require.NoError(t, err)
	require.Equal(t, before, after, "the snapshot does not see the answer committed after it")
	st, err := e.SessionTx(t.Context(), tx, h.SessionID)
	require.NoError(t, err)
	require.Contains(t, st.PendingClientToolCalls, "t1")
	require.Empty(t, st.CompletedClientToolCalls)
	mine, err := e.PendingToolCallsTx(t.Context(), tx, h.SessionID)
	require.NoError(t, err)
	require.Equal(t, before, mine)

	_, err = c.SubmitToolResultTx(t.Context(), tx, h.SessionID, helix.Approve("t1", "stale"))
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe, "not a refusal: the snapshot is stale")
	require.Equal(t, "40001", pe.Code)
	require.NotErrorIs(t, err, helix.ErrSubmissionRejected)
	require.Equal(t, int32(1), executions2(&runs, "t1"))
}

// SubmitToolResultTx needs a launched engine, like SubmitToolResult, and a
// transaction.
func TestSubmitToolResultTxNeedsALaunchedEngineAndATransaction(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := appPool(t, url)
	e, err := engine.New(t.Context(), engine.Config{DatabaseURL: url})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
	_, err = e.SubmitToolResultTx(t.Context(), tx, "s-1", helix.Approve("t1", ""))
	var refused *engine.RefusedError
	require.ErrorAs(t, err, &refused)
	require.Equal(t, engine.RefusedNotLaunched, refused.Code)

	c, err := engine.NewClient(t.Context(), engine.ClientConfig{Pool: pool})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	_, err = c.SubmitToolResultTx(t.Context(), nil, "s-1", helix.Approve("t1", ""))
	require.ErrorContains(t, err, "needs a transaction")
}
