package server_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/server"
)

// POST /interrupt on a session whose run ends while the interrupt is being
// recorded (the status check saw it running; the run's last step commits
// as the flag is written, without seeing it) answers 409 not_running with
// the engine's refusal, the one Client.Interrupt and the CLI's interrupt
// report, and takes the flag back: the session's next turn runs instead of
// stopping before its first step.
func TestInterruptOfARunThatEndedMeanwhileLeavesNoFlag(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{echoAgent()}})
	id, _ := h.start("alice", map[string]any{"agentType": "echo", "message": "hi"})
	h.waitStatus("alice", id, "completed")

	// The race, made deterministic in the database: the session reads as
	// running when the interrupt is checked, and its run completes in the
	// statement that writes the flag.
	pool := h.pool()
	ctx := t.Context()
	_, err := pool.Exec(ctx, `CREATE FUNCTION helix.test_run_ends_meanwhile() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN NEW.status := 'completed'; RETURN NEW; END $$`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `CREATE TRIGGER test_run_ends_meanwhile BEFORE UPDATE ON helix.sessions FOR EACH ROW
		WHEN (NEW.interrupt_requested AND NOT OLD.interrupt_requested) EXECUTE FUNCTION helix.test_run_ends_meanwhile()`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE helix.sessions SET status = 'active' WHERE session_id = $1`, id)
	require.NoError(t, err)

	res := h.do(http.MethodPost, "/interrupt", "alice", map[string]any{"sessionId": id, "reason": "stop"})
	require.Equal(t, http.StatusConflict, res.status, "body: %s", res.raw)
	require.Equal(t, "not_running", res.errCode())
	require.Equal(t, "session "+id+" ended completed before the interrupt was recorded: nothing to interrupt", res.errMessage())

	flagged := func() bool {
		t.Helper()
		var f bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT interrupt_requested FROM helix.sessions WHERE session_id = $1`, id).Scan(&f))
		return f
	}
	require.False(t, flagged(), "the interrupt flag was taken back")

	// The engine's own answer, as the client and the CLI get it: the same
	// refusal, typed.
	_, err = pool.Exec(ctx, `UPDATE helix.sessions SET status = 'active' WHERE session_id = $1`, id)
	require.NoError(t, err)
	err = h.eng.Interrupt(ctx, id, "stop")
	var refused *engine.RefusedError
	require.True(t, errors.As(err, &refused), "got %v", err)
	require.Equal(t, engine.RefusedNotRunning, refused.Code)
	require.Equal(t, res.errMessage(), refused.Message)
	require.False(t, flagged())

	// The next turn runs to its answer.
	_, err = pool.Exec(ctx, `DROP TRIGGER test_run_ends_meanwhile ON helix.sessions`)
	require.NoError(t, err)
	h.start("alice", map[string]any{"agentType": "echo", "sessionId": id, "message": "again"})
	h.waitStatus("alice", id, "completed")
	msgs, err := h.eng.Messages(ctx, id, nil)
	require.NoError(t, err)
	require.Equal(t, "second answer", msgs.Messages[len(msgs.Messages)-1].Content)
}
