package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// gc --dry-run deletes nothing and reports the trees, sessions and rows
// the real run then deletes; the real run deletes only the old session;
// --json prints the result for scripts; a second run finds nothing.
func TestGC(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	db := []string{"--database-url", url}
	agent := newResearchAgent(researchOpts{})
	e := newTestEngine(t, url, agent)
	for _, id := range []string{"old-1", "young-1"} {
		h, err := e.Execute(t.Context(), agent, engine.Input{Message: researchQuestion}, &engine.ExecuteOptions{SessionID: id})
		require.NoError(t, err)
		require.Equal(t, helix.AgentCompleted, waitResult(t, h).Status)
	}
	// Its last activity 40 days ago: a step's commit writes checkpointed_at,
	// anything else updated_at (migration 00026).
	_, err := testStore(t, url).Pool().Exec(t.Context(), `UPDATE helix.sessions SET updated_at = now() - interval '40 days',
		checkpointed_at = now() - interval '40 days' WHERE root_session_id = 'old-1'`)
	require.NoError(t, err)

	code, stdout, stderr := execCLI(append([]string{"gc", "--dry-run", "--older-than", "30d"}, db...)...)
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?m)^would delete 1 session trees: 1 sessions, \d+ workflows, \d+ rows, about \d`, stdout)
	require.Contains(t, stdout, "helix.messages")
	require.Contains(t, stdout, "dry run: nothing was deleted\n")
	require.Contains(t, stderr, "• found 1 trees", "progress on stderr, a line (not a terminal)")
	_, err = e.Session(t.Context(), "old-1")
	require.NoError(t, err, "a dry run deletes nothing")

	var dry, real engine.GCResult
	code, stdout, stderr = execCLI(append([]string{"gc", "--dry-run", "--older-than", "30d", "--json"}, db...)...)
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), &dry), stdout)
	code, stdout, stderr = execCLI(append([]string{"gc", "--older-than", "30d", "--status", "completed,failed", "--json"}, db...)...)
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), &real), stdout)
	require.True(t, dry.DryRun)
	require.False(t, real.DryRun)
	require.Equal(t, 1, real.Trees)
	require.Equal(t, dry.Trees, real.Trees)
	require.Equal(t, dry.Sessions, real.Sessions)
	require.Equal(t, dry.Rows, real.Rows)
	require.Positive(t, real.Rows["dbos.workflow_status"])
	require.Positive(t, real.TotalBytes())
	_, err = e.Session(t.Context(), "old-1")
	require.ErrorIs(t, err, helix.ErrNotFound)
	_, err = e.Session(t.Context(), "young-1")
	require.NoError(t, err, "a young session stays")

	out := mustCLI(t, append([]string{"gc", "--older-than", "0"}, db...)...)
	require.Contains(t, out, "deleted 1 session trees", "--older-than 0: every ended session")

	code, _, stderr = execCLI(append([]string{"gc", "--status", "done"}, db...)...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `--status "done": use one or more of completed,failed,aborted`)
	code, _, stderr = execCLI(append([]string{"gc", "--older-than", "a week"}, db...)...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `--older-than: "a week" is not a duration`)
}

func TestParseAge(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "12h": 12 * time.Hour, "1d12h": 36 * time.Hour, "0": 0, "90m": 90 * time.Minute} {
		got, err := parseAge(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "d", "-1d", "3 days", "1dx"} {
		_, err := parseAge(in)
		require.Error(t, err, in)
	}
}

// serve's retention settings: no age, no job; ages from the file or the
// environment; a 0 age refused.
func TestServeRetentionPolicy(t *testing.T) {
	t.Parallel()
	p, err := config{}.retentionPolicy()
	require.NoError(t, err)
	require.Nil(t, p, "no age set: no retention job, every session kept")
	p, err = config{RetentionCompleted: "30d", RetentionAborted: "12h", RetentionKeepExpired: true, RetentionInterval: time.Minute, RetentionBatch: 10}.retentionPolicy()
	require.NoError(t, err)
	require.Equal(t, &engine.RetentionPolicy{Completed: 30 * 24 * time.Hour, Aborted: 12 * time.Hour, KeepExpired: true, Interval: time.Minute, BatchSize: 10}, p)
	require.Equal(t, "sessions deleted in the background (completed after 30d, failed kept forever, aborted after 12h0m0s, expired sessions kept), a pass every 1m0s",
		describeRetention(p))
	_, err = config{RetentionFailed: "0"}.retentionPolicy()
	require.ErrorContains(t, err, "retention-failed: 0 would delete every ended session at once")

	dir := t.TempDir()
	writeFile(t, dir, defaultConfigFile, "retention-completed: 30d\nretention-batch: 50\n")
	_, c := configOf(t, binOpts{dir: dir, env: []string{"HELIX_RETENTION_FAILED=7d"}})
	require.Equal(t, "30d", c["retention-completed"].Value)
	require.Equal(t, "7d", c["retention-failed"].Value)
	require.Equal(t, "HELIX_RETENTION_FAILED", c["retention-failed"].Env)
	require.EqualValues(t, 50, c["retention-batch"].Value)
}
