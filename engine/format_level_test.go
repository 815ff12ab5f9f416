package engine_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/helixtest"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/steps"
)

// An engine writes a storage format only once every live executor reads it
// (postgres.FormatLevel; docs/storage.md says how a level is added). This
// release has one level; these tests check the mechanism that will carry
// the next one, and what a step of this level writes and replays.

// executorAt records an executor that reads level (NULL: a row just
// claimed whose level is not written yet), alive for an hour (its
// heartbeat fresh, its lease long), as a replica of another release in a
// rolling deploy; it returns the statement that stops it.
func executorAt(t *testing.T, pool *pgxpool.Pool, id string, level *int) (stop func()) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `INSERT INTO helix.executors (executor_id, application_version, hostname, pid, lease_ms, format_level)
		VALUES ($1, $2, 'another-release', 1, 3600000, $3)`, id, engine.DefaultApplicationVersion, level)
	require.NoError(t, err)
	return func() {
		t.Helper()
		_, err := pool.Exec(t.Context(), `UPDATE helix.executors SET stopped_at = now() WHERE executor_id = $1`, id)
		require.NoError(t, err)
	}
}

// databaseWithPool returns a fresh database's URL and a pool on it, closed
// at t's cleanup.
func databaseWithPool(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	url := pgtest.NewURL(t)
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return url, pool
}

// awaitFormatLevel waits (at most 30 s) until e writes at level: the level
// it reads from the cluster at each sweep.
func awaitFormatLevel(t *testing.T, e interface{ FormatLevel() engine.FormatLevel }, level engine.FormatLevel) {
	t.Helper()
	require.Eventually(t, func() bool { return e.FormatLevel() == level }, 30*time.Second, 10*time.Millisecond,
		"writes at format level %s, want %s", e.FormatLevel(), level)
}

// formatLevelAgent calls the note tool (in-process: a step that holds its
// start chunks), then answers.
func formatLevelAgent(x *executions) *helix.Agent {
	return &helix.Agent{Name: "format-levels", Tools: []*helix.Tool{noteTool(x)},
		Model: script(calls(call("n1", "note", `{"text":"a"}`)), text("done"))}
}

// TestFormatLevelOfTheCluster: an engine records the level it reads on its
// executor row and writes at the lowest level of the live executors, as an
// engine.Client does: an executor of a newer release (a higher level) does
// not raise it above its own, and a row whose level is not written yet
// (NULL) counts as the baseline. Cluster reports each executor's level and
// the cluster's.
func TestFormatLevelOfTheCluster(t *testing.T) {
	t.Parallel()
	url, pool := databaseWithPool(t)
	newer := int(engine.FormatLevelNewest) + 1
	stopNewer := executorAt(t, pool, "newer-release", &newer)
	executorAt(t, pool, "just-claimed", nil)

	var x executions
	agent := formatLevelAgent(&x)
	e := helixtest.NewEngine(t, helixtest.EngineOptions{DatabaseURL: url, Quiet: true}, agent)
	require.Equal(t, engine.FormatLevelNewest, e.FormatLevel(), "a newer executor does not raise this release's level")
	var recorded *int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT format_level FROM helix.executors WHERE executor_id = $1`,
		e.ExecutorID()).Scan(&recorded))
	require.NotNil(t, recorded, "the engine records its level at launch")
	require.Equal(t, int(engine.FormatLevelNewest), *recorded)

	c, err := e.Cluster(t.Context(), nil)
	require.NoError(t, err)
	require.Equal(t, engine.FormatLevelNewest, c.FormatLevel, "the lowest level of the alive executors")
	levels := map[string]engine.FormatLevel{}
	for _, x := range c.Executors {
		levels[x.ExecutorID] = x.FormatLevel
	}
	require.Equal(t, map[string]engine.FormatLevel{"newer-release": engine.FormatLevel(newer),
		"just-claimed": engine.FormatLevelBaseline, e.ExecutorID(): engine.FormatLevelNewest}, levels)

	client, err := engine.NewClient(t.Context(), engine.ClientConfig{DatabaseURL: url})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, client.Close()) })
	require.Equal(t, engine.FormatLevelNewest, client.FormatLevel(), "a client's writes too")

	h := e.Start(agent, "go")
	require.Equal(t, helix.AgentCompleted, e.Await(h).Status)
	stopNewer()
	awaitFormatLevel(t, e, engine.FormatLevelNewest)
	e.RequireTranscriptOnce(h.SessionID)
	e.RequireStreamGapFree(h.SessionID)
}

// A step's model call's record is its assistant row (pending until the
// commit), its commit carries its journal records, compact, in its
// checkpoint, and a replay after a crash (after the model call, after the
// commit) reads them there: each tool runs once, each model call is made
// once, each commit is applied once, the start chunks are in the stream
// once.
func TestReplayReadsWhatTheStepWrote(t *testing.T) {
	t.Parallel()
	for _, crash := range []helixtest.CrashPoint{helixtest.AfterCommit(1), helixtest.AfterModelCall(1)} {
		t.Run(string(crash.At), func(t *testing.T) {
			t.Parallel()
			url, pool := databaseWithPool(t)
			var x executions
			var mc modelCalls
			agent := formatLevelAgent(&x)
			agent.Model = mc.Wrap(agent.Model)
			first := helixtest.NewEngine(t, helixtest.EngineOptions{DatabaseURL: url, CrashAt: &crash, Quiet: true}, agent)
			h := first.Start(agent, "go")
			first.AwaitCrash()

			ctx := context.WithoutCancel(t.Context())
			var modelRows int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM helix.messages m JOIN helix.sessions s ON s.key = m.session_key
				WHERE s.session_id = $1 AND m.meta IS NOT NULL`, h.SessionID).Scan(&modelRows))
			require.Equal(t, 1, modelRows, "step 1's model call's record is its assistant row")
			journals := checkpointJournals(t, pool, h.SessionID)
			if crash.At == engine.ProbeAfterCommit {
				require.Len(t, journals, 1)
				requireCompactJournal(t, journals[0])
			}

			second := first.Replacement(helixtest.ReplacementOptions{})
			res := second.Await(second.Attach(h))
			require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
			require.JSONEq(t, `"done"`, string(res.Output))
			require.Equal(t, map[string]int{h.WorkflowID + "/n1": 1}, x.keys, "the tool ran once")
			require.Equal(t, 1, mc.Of(1), "the model call of step 1 ran once")
			require.Len(t, second.Messages(h.SessionID), 4, "user, assistant, tool result, assistant: each commit applied once")
			journals = checkpointJournals(t, pool, h.SessionID)
			require.Len(t, journals, 2, "a checkpoint per step, each carrying its step's records")
			for _, j := range journals {
				requireCompactJournal(t, j)
			}
			var commits int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM helix.step_journal_records
				WHERE workflow_id = $1 AND name = $2 AND output::jsonb ? 'checkpointId'`, h.WorkflowID, steps.NameCommitStep).Scan(&commits))
			require.Equal(t, 2, commits, "helix.step_journal_records shows both commits' records")
			requireStartsOnce(t, second.Stream(h.SessionID), 1, "n1")
			second.RequireTranscriptOnce(h.SessionID)
			second.RequireStreamGapFree(h.SessionID)
		})
	}
}

// checkpointJournals returns the journals of session id's checkpoints, in
// the order they were written (NULL for one without).
func checkpointJournals(t *testing.T, pool *pgxpool.Pool, id string) []string {
	t.Helper()
	var out []string
	require.NoError(t, pool.QueryRow(context.WithoutCancel(t.Context()), `SELECT coalesce(array_agg(coalesce(c.journal, 'NULL') ORDER BY c.created_seq), '{}')
		FROM helix.checkpoints c JOIN helix.sessions s ON s.key = c.session_key WHERE s.session_id = $1`, id).Scan(&out))
	return out
}

// requireCompactJournal checks that a checkpoint's journal is compact: the
// engine's names coded, its commit, whose output is its message count
// alone, the short entry.
func requireCompactJournal(t *testing.T, journal string) {
	t.Helper()
	require.Regexp(t, regexp.MustCompile(`,\[-?\d+,-?\d+\]\]$`), journal, "the short commit entry")
	require.False(t, strings.Contains(journal, `"helix.`), "the engine's names coded: %s", journal)
}
