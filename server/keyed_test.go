package server_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/server"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// The inspector reads a session of either layout (migration 00029): one
// created at storage format level 4 (keyed tables) and one created after
// an older release came back (level 3, the tables of 00001), both asking
// for an approval, approved, completed, then branched by checkpoint ID,
// give the same transcript and checkpoints.
func TestInspectorReadsBothLayouts(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{approverAgent(&runs)}})
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, h.db)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	pages := map[bool]response{}
	for _, keyed := range []bool{true, false} {
		if !keyed {
			_, err := conn.Exec(ctx, `INSERT INTO helix.executors (executor_id, application_version, hostname, pid, lease_ms, format_level)
				VALUES ('previous-3', $1, 'previous-release', 1, 3600000, $2)`, engine.DefaultApplicationVersion, int(postgres.FormatLevelDerivedChunks))
			require.NoError(t, err)
			require.Eventually(t, func() bool { return postgres.FormatLevel(h.eng.FormatLevel()) == postgres.FormatLevelDerivedChunks }, 30*time.Second, 10*time.Millisecond)
		}
		id, _ := h.start("alice", map[string]any{"agentType": "approver", "message": "pay"})
		h.waitStatus("alice", id, "suspended_client_tool")
		res := h.do(http.MethodPost, "/submit-tool-result", "alice", map[string]any{"sessionId": id, "kind": "approval-response", "toolCallId": "t1", "approved": true})
		require.Equal(t, http.StatusOK, res.status, "body: %s", res.raw)
		h.waitStatus("alice", id, "completed")
		var hasKey bool
		require.NoError(t, conn.QueryRow(ctx, `SELECT key IS NOT NULL FROM helix.sessions WHERE session_id = $1`, id).Scan(&hasKey))
		require.Equal(t, keyed, hasKey, "the session's layout is its creation's level's")

		page := h.do(http.MethodGet, "/inspector/api/session?sessionId="+id, "alice", nil)
		require.Equal(t, http.StatusOK, page.status, "body: %s", page.raw)
		pages[keyed] = page
		cps := page.body["checkpoints"].([]any)
		require.Len(t, cps, 2)
		for i, c := range cps {
			require.InDelta(t, i+1, c.(map[string]any)["stepCount"], 0)
		}

		branch := id + "-branch"
		res = h.do(http.MethodPost, "/branch", "alice", map[string]any{"sessionId": id, "checkpointId": cps[0].(map[string]any)["id"],
			"newSessionId": branch, "message": "again"})
		require.Equal(t, http.StatusAccepted, res.status, "body: %s", res.raw)
		h.waitStatus("alice", branch, "completed") // the branch goes on from step 1: the script's answer
		bp := h.do(http.MethodGet, "/inspector/api/session?sessionId="+branch, "alice", nil)
		require.Equal(t, http.StatusOK, bp.status, "body: %s", bp.raw)
		require.Equal(t, page.body["messages"].([]any)[:2], bp.body["messages"].([]any)[:2], "the branch's messages up to its checkpoint")
	}
	require.Equal(t, pages[true].body["messages"], pages[false].body["messages"], "the same transcript in both layouts")
	require.Equal(t, int32(2), runs.Load())
}
