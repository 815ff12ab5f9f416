package server_test

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/server"
)

// POST /delete deletes the caller's session tree: another principal's
// session is 404 session_not_found (as a missing one) and stays; a running
// session is 409 session_running until force aborts it; deleted, the
// session is gone, and deleting it again is 404.
func TestDeleteRoute(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{approverAgent(&runs), echoAgent()}})
	waiting, _ := h.start("alice", map[string]any{"agentType": "approver", "message": "pay bob"})
	h.waitStatus("alice", waiting, "suspended_client_tool")
	done, _ := h.start("alice", map[string]any{"agentType": "echo", "message": "hi"})
	h.waitStatus("alice", done, "completed")

	missing := h.do(http.MethodPost, "/delete", "mallory", map[string]any{"sessionId": "does-not-exist"})
	require.Equal(t, http.StatusNotFound, missing.status)
	res := h.do(http.MethodPost, "/delete", "mallory", map[string]any{"sessionId": done, "force": true})
	require.Equal(t, http.StatusNotFound, res.status, "body: %s", res.raw)
	require.Equal(t, "session_not_found", res.errCode())
	require.Equal(t, http.StatusOK, h.status("alice", done).status, "another principal cannot delete it")

	res = h.do(http.MethodPost, "/delete", "alice", map[string]any{"sessionId": waiting})
	require.Equal(t, http.StatusConflict, res.status, "body: %s", res.raw)
	require.Equal(t, "session_running", res.errCode())
	require.Contains(t, res.errMessage(), "force")
	require.Equal(t, "suspended_client_tool", h.status("alice", waiting).body["status"])

	res = h.do(http.MethodPost, "/delete", "alice", map[string]any{"sessionId": waiting, "force": true})
	require.Equal(t, http.StatusOK, res.status, "body: %s", res.raw)
	require.Equal(t, "deleted", res.body["status"])
	require.EqualValues(t, 1, res.body["sessions"])
	require.Equal(t, http.StatusNotFound, h.status("alice", waiting).status)
	require.Zero(t, runs.Load(), "the waiting tool never ran")

	res = h.do(http.MethodPost, "/delete", "alice", map[string]any{"sessionId": done})
	require.Equal(t, http.StatusOK, res.status, "body: %s", res.raw)
	require.Positive(t, res.body["workflows"])
	res = h.do(http.MethodPost, "/delete", "alice", map[string]any{"sessionId": done})
	require.Equal(t, http.StatusNotFound, res.status, "deleted already")
	require.Equal(t, "session_not_found", res.errCode())
}
