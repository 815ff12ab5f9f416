package agentfile_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/agentfile"
	"github.com/helix-agents/helix-dbos/mcp"
)

// An agent's mcp section gives it one tool source per server, configured
// as written (env as KEY=VALUE entries), closed with the agents.
func TestMCPServers(t *testing.T) {
	t.Parallel()
	path := write(t, "agents.yaml", `
agents:
  - name: a
    model: {provider: scripted, script: s.yaml}
    mcp:
      - name: files
        command: mcp-files
        args: [--root, /srv]
        env: {LOG: debug, MODE: ro}
        callTimeout: 30s
        approvalFor: [write_*, delete_*]
      - name: tracker
        url: https://tracker.example/mcp
        headers: {X-Team: core}
        bearerTokenEnv: TRACKER_TOKEN
        requireApproval: true
        reconnects: -1
`, "s.yaml", script)
	agents, err := agentfile.Load(path, nil)
	require.NoError(t, err)
	a, ok := agents.Get("a")
	require.True(t, ok)
	require.Len(t, a.ToolSources, 2)
	files := a.ToolSources[0].(*mcp.Client).Server()
	require.Equal(t, mcp.Server{Name: "files", Command: "mcp-files", Args: []string{"--root", "/srv"}, Env: []string{"LOG=debug", "MODE=ro"},
		CallTimeout: 30 * time.Second, ApprovalFor: []string{"write_*", "delete_*"}}, files)
	tracker := a.ToolSources[1].(*mcp.Client).Server()
	require.Equal(t, mcp.Server{Name: "tracker", URL: "https://tracker.example/mcp", Headers: map[string]string{"X-Team": "core"},
		BearerTokenEnv: "TRACKER_TOKEN", RequireApproval: true, Reconnects: -1}, tracker)
	require.True(t, tracker.NeedsApproval("anything"))
	require.True(t, files.NeedsApproval("write_file"))
	require.False(t, files.NeedsApproval("read_file"))
	require.NoError(t, agents.Close())
}
