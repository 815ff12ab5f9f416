package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// rowsWithPrefix counts, for every table of the helix and dbos schemas,
// the rows with a text column (or an element of a text array column) that
// starts with prefix: every identity of a session tree (its sessions,
// streams and workflows) starts with its root's ID. Tables are enumerated
// from information_schema, so a table added later is checked too.
func rowsWithPrefix(t *testing.T, pool *pgxpool.Pool, prefix string) map[string]int {
	t.Helper()
	ctx := t.Context()
	rows, err := pool.Query(ctx, `SELECT c.table_schema, c.table_name, c.column_name, c.data_type
		FROM information_schema.columns c JOIN information_schema.tables t USING (table_schema, table_name)
		WHERE c.table_schema IN ('helix', 'dbos') AND t.table_type = 'BASE TABLE'
		  AND (c.data_type IN ('text', 'character varying') OR (c.data_type = 'ARRAY' AND c.udt_name = '_text'))
		ORDER BY 1, 2, 3`)
	require.NoError(t, err)
	type column struct{ schema, table, name, kind string }
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		return c, r.Scan(&c.schema, &c.table, &c.name, &c.kind)
	})
	require.NoError(t, err)
	require.NotEmpty(t, cols)
	where := map[string][]string{}
	var tables []string
	for _, c := range cols {
		table := pgx.Identifier{c.schema, c.table}.Sanitize()
		if _, ok := where[table]; !ok {
			tables = append(tables, table)
		}
		col := pgx.Identifier{c.name}.Sanitize()
		if c.kind == "ARRAY" {
			where[table] = append(where[table], fmt.Sprintf("EXISTS (SELECT 1 FROM unnest(%s) x WHERE starts_with(x, $1))", col))
		} else {
			where[table] = append(where[table], fmt.Sprintf("starts_with(%s::text, $1)", col))
		}
	}
	// The per-step tables name their session or stream by its key: a row is the tree's when its key is one of the tree's, and
	// a row whose key no session or stream has (left behind) counts for
	// every prefix.
	for table, w := range map[string]string{
		`"helix"."messages"`:      `session_key IN (SELECT key FROM helix.sessions WHERE starts_with(session_id, $1)) OR session_key NOT IN (SELECT key FROM helix.sessions WHERE key IS NOT NULL)`,
		`"helix"."checkpoints"`:   `session_key IN (SELECT key FROM helix.sessions WHERE starts_with(session_id, $1)) OR session_key NOT IN (SELECT key FROM helix.sessions WHERE key IS NOT NULL)`,
		`"helix"."stream_chunks"`: `stream_key IN (SELECT key FROM helix.streams WHERE starts_with(stream_id, $1)) OR stream_key NOT IN (SELECT key FROM helix.streams WHERE key IS NOT NULL)`,
	} {
		if _, ok := where[table]; !ok {
			tables = append(tables, table)
		}
		where[table] = append(where[table], w)
	}
	out := map[string]int{}
	for _, table := range tables {
		q := "SELECT count(*) FROM " + table + " WHERE false"
		for _, w := range where[table] {
			q += " OR " + w
		}
		var n int
		require.NoError(t, pool.QueryRow(ctx, q, prefix).Scan(&n), q)
		if n > 0 {
			out[table] = n
		}
	}
	return out
}

// deleteTree is an agent that exercises everything a session tree holds: a
// blocking companion consulted, a sub-agent that asks the user (answered),
// an approval-gated tool (approved), streamed text.
func deleteTree() *helix.Agent {
	var runs sync.Map
	return &helix.Agent{
		Name:             "keeper-of-everything",
		Tools:            []*helix.Tool{helix.MustSubAgentTool(askingResearcher(), nil, nil), transferTool(&runs)},
		PersistentAgents: []helix.PersistentAgent{{Agent: consultant("advisor", nil, 1)}},
		Model: script(
			calls(call("c1", helix.CompanionSpawnAgent, `{"agentType":"advisor","name":"adv","message":"q1"}`)),
			calls(call("r1", "subagent__researcher", `{"task":"research"}`)),
			calls(call("t1", "transfer", `{"to":"bob","amount":5}`)),
			text("all done"),
		),
	}
}

// runTree runs deleteTree's agent on a new session to its end, answering
// its sub-agent's question and approving its transfer.
func runTree(t *testing.T, e *engine.Engine, agent *helix.Agent) string {
	t.Helper()
	id := uuid.NewString()
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "do everything"}, &engine.ExecuteOptions{SessionID: id})
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedAwaitingChildren, awaitSuspended(t, h).Status)
	submit(t, e, id, clientResult(t, "ask1", answer{Answer: "durability"}))
	h, err = e.Resume(t.Context(), id, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, awaitSuspended(t, h).Status)
	submit(t, e, id, helix.Approve("t1", "fine"))
	h, err = e.Resume(t.Context(), id, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	return id
}

// awaitSuspended waits for the run to suspend (or end) and returns its
// result.
func awaitSuspended(t *testing.T, h *engine.Handle) helix.AgentResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		res, err := h.Result(ctx)
		require.NoError(t, err)
		if res.Status != helix.AgentRunning {
			return res
		}
	}
}

// Deleting a session tree that ran everything (a companion, a sub-agent
// answered, an approval, streaming, every run admitted through a queue in
// segments) leaves no row of it in any table of the helix and dbos
// schemas, and every row of another session stays.
func TestDeleteSessionLeavesNoRowOfTheTree(t *testing.T) {
	t.Parallel()
	agent := deleteTree()
	e := newEngineWith(t, engine.Config{DatabaseURL: pgtest.NewURL(t),
		Queue: &engine.QueueConfig{PollingInterval: 20 * time.Millisecond}}, agent)
	gone := runTree(t, e, agent)
	kept := runTree(t, e, agent)
	pool := engine.StoreOf(e).Pool()

	before := rowsWithPrefix(t, pool, gone)
	for _, table := range []string{`"helix"."sessions"`, `"helix"."messages"`, `"helix"."checkpoints"`, `"helix"."runs"`,
		`"helix"."sub_session_refs"`, `"helix"."streams"`, `"helix"."stream_chunks"`, `"helix"."step_journal"`,
		`"dbos"."workflow_status"`, `"dbos"."workflow_input"`, `"dbos"."workflow_output"`, `"dbos"."operation_outputs"`} {
		require.Positive(t, before[table], "the tree has rows in %s before it is deleted: %v", table, before)
	}
	var children int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM dbos.workflow_status
		WHERE starts_with(workflow_uuid, $1) AND parent_workflow_id IS NOT NULL`, gone).Scan(&children))
	require.Positive(t, children, "the queued runs' segments are DBOS child workflows of their drivers")
	keptBefore := rowsWithPrefix(t, pool, kept)
	for table := range before {
		require.Positive(t, keptBefore[table], "the other tree has rows in %s too", table)
	}

	_, err := e.DeleteSession(t.Context(), gone+"-sub-r1", nil)
	require.ErrorIs(t, err, helix.ErrNotRootSession, "a sub-agent's session is deleted with its root")

	stats, err := e.DeleteSession(t.Context(), gone, nil)
	require.NoError(t, err)
	require.Equal(t, []string{gone}, stats.Deleted)
	require.Empty(t, stats.NotFound)
	require.EqualValues(t, 3, stats.Sessions, "the root, its sub-agent and its companion")
	require.Positive(t, stats.Workflows)
	require.Empty(t, rowsWithPrefix(t, pool, gone), "no row of the deleted tree remains")
	require.Equal(t, keptBefore, rowsWithPrefix(t, pool, kept), "the other session's rows all remain")

	again, err := e.DeleteSession(t.Context(), gone, nil)
	require.NoError(t, err, "deleting twice is not an error")
	require.Equal(t, []string{gone}, again.NotFound)
	require.Empty(t, again.Deleted)
}

// A session waiting for an approval is running: deleting it is refused,
// and nothing is deleted, until Force aborts it, waits for its workflow to
// end and deletes it.
func TestDeleteSessionRefusesARunningSession(t *testing.T) {
	t.Parallel()
	var runs sync.Map
	agent := payer(&runs)
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "pay bob"}, &engine.ExecuteOptions{SessionID: uuid.NewString()})
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, awaitSuspended(t, h).Status)
	pool := engine.StoreOf(e).Pool()
	before := rowsWithPrefix(t, pool, h.SessionID)

	_, err = e.DeleteSession(t.Context(), h.SessionID, nil)
	require.ErrorIs(t, err, helix.ErrSessionRunning)
	var running *helix.SessionRunningError
	require.ErrorAs(t, err, &running)
	require.Equal(t, h.SessionID, running.RunningSessionID)
	require.Contains(t, err.Error(), "force")
	require.Equal(t, before, rowsWithPrefix(t, pool, h.SessionID), "a refused deletion deletes nothing")

	stats, err := e.DeleteSession(t.Context(), h.SessionID, &engine.DeleteOptions{Force: true})
	require.NoError(t, err)
	require.Equal(t, []string{h.SessionID}, stats.Deleted)
	require.Empty(t, rowsWithPrefix(t, pool, h.SessionID))
	_, err = h.Result(t.Context())
	require.Error(t, err, "the run was aborted")
	require.Zero(t, executions2(&runs, "t1"), "the waiting tool never ran")
}

// A turn that starts while a deletion's transaction holds the session
// waits for it, then finds the session gone: no run starts on a session
// being deleted.
func TestDeleteSessionBlocksARunStartingMeanwhile(t *testing.T) {
	t.Parallel()
	agent := &helix.Agent{Name: "echo", Model: script(text("first"), text("second"))}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "hi"}, &engine.ExecuteOptions{SessionID: uuid.NewString()})
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, h).Status)
	pool := engine.StoreOf(e).Pool()

	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
	stats, err := engine.StoreOf(e).WithQuerier(postgres.PgxQuerier(tx)).DeleteSessionTrees(t.Context(), []string{h.SessionID}, nil)
	require.NoError(t, err)
	require.Equal(t, []string{h.SessionID}, stats.Deleted)

	started := make(chan error, 1)
	go func() {
		_, err := e.Execute(t.Context(), agent, engine.Input{Message: "again"}, &engine.ExecuteOptions{SessionID: h.SessionID})
		started <- err
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting))
		return waiting
	}, 10*time.Second, 5*time.Millisecond, "the new turn waits for the deletion's lock")
	require.NoError(t, tx.Commit(t.Context()))
	require.ErrorIs(t, <-started, helix.ErrNotFound, "the turn finds the session deleted")
	require.Empty(t, rowsWithPrefix(t, pool, h.SessionID), "and wrote nothing")
}

// A root waiting for its sub-agent, which waits for the user, is running
// through its child: refused, then deleted with Force, which aborts the
// tree (the child's wait too) and leaves no row of it.
func TestDeleteSessionForceAbortsAWaitingTree(t *testing.T) {
	t.Parallel()
	parent := &helix.Agent{
		Name:  "boss",
		Tools: []*helix.Tool{helix.MustSubAgentTool(askingResearcher(), nil, nil)},
		Model: script(calls(call("r1", "subagent__researcher", `{"task":"research"}`)), text("done")),
	}
	e := newEngine(t, parent)
	h, err := e.Execute(t.Context(), parent, engine.Input{Message: "go"}, &engine.ExecuteOptions{SessionID: uuid.NewString()})
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedAwaitingChildren, awaitSuspended(t, h).Status)
	pool := engine.StoreOf(e).Pool()

	_, err = e.DeleteSession(t.Context(), h.SessionID, nil)
	require.ErrorIs(t, err, helix.ErrSessionRunning)
	_, err = e.DeleteSession(t.Context(), h.SessionID+"-sub-r1", &engine.DeleteOptions{Force: true})
	require.ErrorIs(t, err, helix.ErrNotRootSession, "Force does not abort a tree given a sub-agent's ID")
	st, err := e.Session(t.Context(), h.SessionID+"-sub-r1")
	require.NoError(t, err)
	require.Equal(t, helix.SessionActive, st.Status, "nothing was aborted")

	stats, err := e.DeleteSession(t.Context(), h.SessionID, &engine.DeleteOptions{Force: true})
	require.NoError(t, err)
	require.EqualValues(t, 2, stats.Sessions)
	require.Empty(t, rowsWithPrefix(t, pool, h.SessionID))
}
