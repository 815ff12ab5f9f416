package main

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// sessions delete deletes completed sessions, reports a missing one
// without failing, refuses a session waiting for an approval (exit 1,
// nothing deleted) until --force, and prints JSON for scripts.
func TestSessionsDelete(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	db := []string{"--database-url", url}
	var runs sync.Map
	agent := hitlAgent(&runs, false)
	e := newTestEngine(t, url, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "pay and ask"}, &engine.ExecuteOptions{SessionID: "bank"})
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, waitResult(t, h).Status)
	done := newResearchAgent(researchOpts{})
	require.NoError(t, e.Register(done))
	h, err = e.Execute(t.Context(), done, engine.Input{Message: researchQuestion}, &engine.ExecuteOptions{SessionID: "research-1"})
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, waitResult(t, h).Status)

	code, stdout, stderr := execCLI(append([]string{"sessions", "delete", "bank", "research-1", "nobody"}, db...)...)
	require.Equal(t, 1, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Contains(t, stdout, "session bank: refused: ")
	require.Contains(t, stdout, "--force")
	require.Regexp(t, `(?m)^session research-1: deleted \(1 sessions, \d+ workflows, \d+ rows\)$`, stdout)
	require.Contains(t, stdout, "session nobody: not found, nothing to delete\n")
	require.Contains(t, stdout, "1 deleted, 1 not found, 1 refused or failed\n")
	require.Contains(t, stderr, "1 of 3 sessions were not deleted")
	_, err = e.Session(t.Context(), "research-1")
	require.ErrorIs(t, err, helix.ErrNotFound)
	st, err := e.Session(t.Context(), "bank")
	require.NoError(t, err, "a refused session stays")
	require.Equal(t, helix.SessionActive, st.Status)

	out := mustCLI(t, append([]string{"sessions", "delete", "research-1"}, db...)...)
	require.Equal(t, "session research-1: not found, nothing to delete\n0 deleted, 1 not found, 0 refused or failed\n", out,
		"deleting twice is not an error")

	var rep deleteReport
	out = mustCLI(t, append([]string{"sessions", "delete", "bank", "--force", "--json"}, db...)...)
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Equal(t, 1, rep.Deleted)
	require.Equal(t, "deleted", rep.Results[0].Status)
	require.Positive(t, rep.Results[0].Rows["dbos.workflow_status"])
	_, err = e.Session(t.Context(), "bank")
	require.ErrorIs(t, err, helix.ErrNotFound)
	require.Zero(t, executionsOf(&runs, "g1"), "the waiting tool never ran")
}
