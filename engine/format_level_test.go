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
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// An engine writes a storage format only once every live executor reads it
// (postgres.FormatLevel): these tests put an executor of the previous
// release (a helix.executors row without a level, its heartbeat fresh) in
// the cluster and check what the engines write, and that a workflow whose
// writes change level between its execution and its replay runs each tool
// once and commits once.

// previousRelease records an executor of a release before the format
// levels, alive for an hour (its heartbeat fresh, its lease long), as a
// replica not yet replaced in a rolling deploy; it returns the statement
// that stops it.
func previousRelease(t *testing.T, pool *pgxpool.Pool, id string) (stop func()) {
	t.Helper()
	return previousReleaseAt(t, pool, id, postgres.FormatLevelBase)
}

// previousReleaseAt is previousRelease of a release that reads level (a
// row without one for FormatLevelBase).
func previousReleaseAt(t *testing.T, pool *pgxpool.Pool, id string, level postgres.FormatLevel) (stop func()) {
	t.Helper()
	var recorded *int
	if level != postgres.FormatLevelBase {
		recorded = new(int(level))
	}
	_, err := pool.Exec(t.Context(), `INSERT INTO helix.executors (executor_id, application_version, hostname, pid, lease_ms, format_level)
		VALUES ($1, $2, 'previous-release', 1, 3600000, $3)`, id, engine.DefaultApplicationVersion, recorded)
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
func awaitFormatLevel(t *testing.T, e interface{ FormatLevel() engine.FormatLevel }, level postgres.FormatLevel) {
	t.Helper()
	require.Eventually(t, func() bool { return postgres.FormatLevel(e.FormatLevel()) == level }, 30*time.Second, 10*time.Millisecond,
		"writes at format level %s, want %s", postgres.FormatLevel(e.FormatLevel()), level)
}

// writtenAt is what a session's first step wrote, as the formats of a level
// show it.
type writtenAt struct {
	// formats are the first characters of its stream's rows: "{" (a
	// chunk as it is), "[2" or "[3" (coded rows of format 2 or 3).
	formats map[string]int
	// checkpointJournals counts its checkpoints that carry journal records.
	checkpointJournals int
	// startsHeld reports that step 1's step_start shares its row with the
	// step's step_committed: held for the commit, not written with the
	// model call's record.
	startsHeld bool
	// records counts its workflow's journal records (the view of both
	// forms), journalRows those in helix.step_journal rows.
	records, journalRows int
	// pointer is the session row's checkpoint_id as stored (an ID; ''
	// for "the newest" from migration 00026 until 00034), and touched
	// whether the session's updated_at is its last commit's time (the
	// commit wrote it).
	pointer string
	touched bool
	// modelRows counts the session's message rows that hold a model call's
	// record (messages.meta, FormatLevelModelMessages).
	modelRows int
}

func readWritten(t *testing.T, e *helixtest.Engine, pool *pgxpool.Pool, sessionID, workflowID string) writtenAt {
	t.Helper()
	chunks := e.Stream(sessionID)
	require.NotEmpty(t, chunks)
	w := writtenAt{formats: map[string]int{}}
	type span struct{ first, last int64 }
	var rows []span
	r, err := pool.Query(t.Context(), `SELECT seq - n + 1, seq, left(chunk::text, 2) FROM helix.all_stream_chunks WHERE stream_id = $1`,
		chunks[0].StreamID)
	require.NoError(t, err)
	for r.Next() {
		var s span
		var head string
		require.NoError(t, r.Scan(&s.first, &s.last, &head))
		rows = append(rows, s)
		w.formats[strings.TrimRight(head, `"`)]++
	}
	require.NoError(t, r.Err())
	rowOf := func(seq int64) int {
		for i, s := range rows {
			if s.first <= seq && seq <= s.last {
				return i
			}
		}
		t.Fatalf("no row holds chunk %d", seq)
		return -1
	}
	start, committed := -1, -1
	for _, c := range chunks {
		switch ch := c.Chunk.(type) {
		case *helix.StepStartChunk:
			if ch.Step == 1 {
				start = rowOf(c.Sequence)
			}
		case *helix.StepCommittedChunk:
			if ch.Step == 1 {
				committed = rowOf(c.Sequence)
			}
		}
	}
	require.NotEqual(t, -1, start, "step 1's step_start")
	require.NotEqual(t, -1, committed, "step 1's step_committed")
	w.startsHeld = start == committed
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM helix.all_checkpoints WHERE session_id = $1 AND journal IS NOT NULL`,
		sessionID).Scan(&w.checkpointJournals))
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM helix.step_journal_records WHERE workflow_id = $1),
		(SELECT coalesce(sum(n), 0) FROM helix.step_journal WHERE workflow_id = $1)`, workflowID).Scan(&w.records, &w.journalRows))
	require.Positive(t, w.records)
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT checkpoint_id, updated_at = checkpointed_at
		FROM helix.sessions WHERE session_id = $1`, sessionID).Scan(&w.pointer, &w.touched))
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM helix.all_messages WHERE session_id = $1 AND meta IS NOT NULL`,
		sessionID).Scan(&w.modelRows))
	return w
}

// formatLevelAgent calls the note tool (in-process: a step that holds its
// start chunks at level 1), then answers.
func formatLevelAgent(x *executions) *helix.Agent {
	return &helix.Agent{Name: "format-levels", Tools: []*helix.Tool{noteTool(x)},
		Model: script(calls(call("n1", "note", `{"text":"a"}`)), text("done"))}
}

// While an executor of the previous release is alive, an engine writes
// what that release reads: chunk rows of format 2 (a chunk alone as its
// JSON), the commit's journal records in helix.step_journal, start chunks
// with the model call's record. Once it stopped (or its lease expired), the
// engine's sweep raises the level, and the next steps write format 3,
// checkpoint journals and held start chunks.
func TestFormatLevelFollowsTheLiveExecutors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		gone func(t *testing.T, pool *pgxpool.Pool, stop func())
	}{
		{"stopped", func(_ *testing.T, _ *pgxpool.Pool, stop func()) { stop() }},
		{"lease expired", func(t *testing.T, pool *pgxpool.Pool, _ func()) {
			_, err := pool.Exec(t.Context(), `UPDATE helix.executors SET heartbeat_at = now() - interval '2 hours'
				WHERE executor_id = 'previous-1'`)
			require.NoError(t, err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, pool := databaseWithPool(t)
			stop := previousRelease(t, pool, "previous-1")

			var x executions
			agent := formatLevelAgent(&x)
			e := helixtest.NewEngine(t, helixtest.EngineOptions{DatabaseURL: url, Quiet: true}, agent)
			require.Equal(t, postgres.FormatLevelBase, postgres.FormatLevel(e.FormatLevel()), "read at launch: previous-1 reads level 0")
			c, err := e.Cluster(t.Context(), nil)
			require.NoError(t, err)
			require.Equal(t, postgres.FormatLevelBase, postgres.FormatLevel(c.FormatLevel))
			levels := map[string]postgres.FormatLevel{}
			for _, x := range c.Executors {
				levels[x.ExecutorID] = postgres.FormatLevel(x.FormatLevel)
			}
			require.Equal(t, map[string]postgres.FormatLevel{"previous-1": postgres.FormatLevelBase,
				e.ExecutorID(): postgres.FormatLevelNewest}, levels)

			client, err := engine.NewClient(t.Context(), engine.ClientConfig{DatabaseURL: url})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, client.Close()) })
			require.Equal(t, postgres.FormatLevelBase, postgres.FormatLevel(client.FormatLevel()), "a client's writes too")

			h := e.Start(agent, "go")
			require.Equal(t, helix.AgentCompleted, e.Await(h).Status)
			old := readWritten(t, e, pool, h.SessionID, h.WorkflowID)
			require.Zero(t, old.formats["[3"], "no row of format 3: %v", old.formats)
			require.Positive(t, old.formats["{"], "chunks alone as their JSON: %v", old.formats)
			require.Positive(t, old.formats["[2"], "rows of several in format 2: %v", old.formats)
			require.Zero(t, old.checkpointJournals, "the commits' records are helix.step_journal rows")
			require.False(t, old.startsHeld, "the start chunks went out with the model call's record")
			require.Equal(t, old.records, old.journalRows, "every record is in a helix.step_journal row")
			require.NotEmpty(t, old.pointer, "the session points at its checkpoint by ID, as previous-1 reads it")
			require.True(t, old.touched, "the commits wrote the session's updated_at, as previous-1 reads it")
			require.Zero(t, old.modelRows, "the model call's record is a helix.step_journal row, not the assistant row")

			tc.gone(t, pool, stop)
			awaitFormatLevel(t, e, postgres.FormatLevelNewest)
			awaitFormatLevel(t, client, postgres.FormatLevelNewest)
			h2 := e.Start(agent, "go again")
			require.Equal(t, helix.AgentCompleted, e.Await(h2).Status)
			cur := readWritten(t, e, pool, h2.SessionID, h2.WorkflowID)
			require.Positive(t, cur.formats["[3"], "rows of format 3: %v", cur.formats)
			require.Zero(t, cur.formats["[2"], "%v", cur.formats)
			require.Equal(t, 2, cur.checkpointJournals, "each commit's records are its checkpoint's")
			require.True(t, cur.startsHeld, "the start chunks were held for the commit")
			require.Less(t, cur.journalRows, cur.records, "the commits' records are not in helix.step_journal rows")
			require.NotEmpty(t, cur.pointer, "the commit points the session at its checkpoint by ID (migration 00034)")
			require.False(t, cur.touched, "the commits left the session's updated_at to checkpointed_at")
			require.Equal(t, 1, cur.modelRows, "step 1's model call's record is its assistant row")
			for _, s := range []string{h.SessionID, h2.SessionID} {
				e.RequireTranscriptOnce(s)
				e.RequireStreamGapFree(s)
			}
			require.Equal(t, map[string]int{h.WorkflowID + "/n1": 1, h2.WorkflowID + "/n1": 1}, x.keys)
		})
	}
}

// A workflow begun at one level and replayed at another after a crash (the
// cluster's level changed meanwhile: the last old replica stopped, or an
// old one joined) runs each tool once and commits each step once, its
// start chunks in the stream once: a replay reads the records and chunks
// of both levels, whatever it writes.
func TestFormatLevelChangesBetweenAnExecutionAndItsReplay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		from, to postgres.FormatLevel
		crash    helixtest.CrashPoint
	}{
		{"0 to newest after the commit", postgres.FormatLevelBase, postgres.FormatLevelNewest, helixtest.AfterCommit(1)},
		{"0 to newest after the model call", postgres.FormatLevelBase, postgres.FormatLevelNewest, helixtest.AfterModelCall(1)},
		{"newest to 0 after the commit", postgres.FormatLevelNewest, postgres.FormatLevelBase, helixtest.AfterCommit(1)},
		{"newest to 0 after the model call", postgres.FormatLevelNewest, postgres.FormatLevelBase, helixtest.AfterModelCall(1)},
		{"1 to 2 after the commit", postgres.FormatLevelCheckpointJournals, postgres.FormatLevelModelMessages, helixtest.AfterCommit(1)},
		{"1 to 2 after the model call", postgres.FormatLevelCheckpointJournals, postgres.FormatLevelModelMessages, helixtest.AfterModelCall(1)},
		{"2 to 1 after the commit", postgres.FormatLevelModelMessages, postgres.FormatLevelCheckpointJournals, helixtest.AfterCommit(1)},
		{"2 to 1 after the model call", postgres.FormatLevelModelMessages, postgres.FormatLevelCheckpointJournals, helixtest.AfterModelCall(1)},
		{"1 to 3 after the commit", postgres.FormatLevelCheckpointJournals, postgres.FormatLevelDerivedChunks, helixtest.AfterCommit(1)},
		{"1 to 3 after the model call", postgres.FormatLevelCheckpointJournals, postgres.FormatLevelDerivedChunks, helixtest.AfterModelCall(1)},
		{"3 to 1 after the commit", postgres.FormatLevelDerivedChunks, postgres.FormatLevelCheckpointJournals, helixtest.AfterCommit(1)},
		{"3 to 1 after the model call", postgres.FormatLevelDerivedChunks, postgres.FormatLevelCheckpointJournals, helixtest.AfterModelCall(1)},
		{"2 to 3 after the commit", postgres.FormatLevelModelMessages, postgres.FormatLevelDerivedChunks, helixtest.AfterCommit(1)},
		{"3 to 2 after the model call", postgres.FormatLevelDerivedChunks, postgres.FormatLevelModelMessages, helixtest.AfterModelCall(1)},
		{"3 to 4 after the commit", postgres.FormatLevelDerivedChunks, postgres.FormatLevelKeyedTables, helixtest.AfterCommit(1)},
		{"3 to 4 after the model call", postgres.FormatLevelDerivedChunks, postgres.FormatLevelKeyedTables, helixtest.AfterModelCall(1)},
		{"4 to 3 after the commit", postgres.FormatLevelKeyedTables, postgres.FormatLevelDerivedChunks, helixtest.AfterCommit(1)},
		{"4 to 3 after the model call", postgres.FormatLevelKeyedTables, postgres.FormatLevelDerivedChunks, helixtest.AfterModelCall(1)},
		{"4 to 5 after the commit", postgres.FormatLevelKeyedTables, postgres.FormatLevelCompactJournals, helixtest.AfterCommit(1)},
		{"4 to 5 after the model call", postgres.FormatLevelKeyedTables, postgres.FormatLevelCompactJournals, helixtest.AfterModelCall(1)},
		{"5 to 4 after the commit", postgres.FormatLevelCompactJournals, postgres.FormatLevelKeyedTables, helixtest.AfterCommit(1)},
		{"5 to 4 after the model call", postgres.FormatLevelCompactJournals, postgres.FormatLevelKeyedTables, helixtest.AfterModelCall(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, pool := databaseWithPool(t)
			var stop func()
			if tc.from < postgres.FormatLevelNewest {
				stop = previousReleaseAt(t, pool, "previous-1", tc.from)
			}
			var x executions
			var mc modelCalls
			agent := formatLevelAgent(&x)
			agent.Model = mc.Wrap(agent.Model)
			first := helixtest.NewEngine(t, helixtest.EngineOptions{DatabaseURL: url, CrashAt: &tc.crash, Quiet: true}, agent)
			require.Equal(t, tc.from, postgres.FormatLevel(first.FormatLevel()))
			h := first.Start(agent, "go")
			first.AwaitCrash()

			// Where step 1's model call's record is: its assistant row
			// from FormatLevelModelMessages (pending: the crash may come
			// before its commit), a helix.step_journal row below.
			var modelRows int
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM helix.all_messages WHERE session_id = $1 AND meta IS NOT NULL`,
				h.SessionID).Scan(&modelRows))
			require.Equal(t, map[bool]int{true: 1, false: 0}[tc.from >= postgres.FormatLevelModelMessages], modelRows)
			// Step 1's commit, if it committed, carries its journal in the
			// form of the first engine's level: compact from
			// FormatLevelCompactJournals (a coded name, the short commit
			// entry), the replay reads it either way.
			var journals []string
			require.NoError(t, pool.QueryRow(context.WithoutCancel(t.Context()), `SELECT coalesce(array_agg(journal ORDER BY created_seq), '{}')
				FROM helix.all_checkpoints WHERE session_id = $1 AND journal IS NOT NULL`, h.SessionID).Scan(&journals))
			if tc.from >= postgres.FormatLevelCheckpointJournals && tc.crash.At == engine.ProbeAfterCommit {
				require.Len(t, journals, 1)
				requireJournalForm(t, journals[0], tc.from >= postgres.FormatLevelCompactJournals)
			}
			if stop != nil {
				stop()
			}
			if tc.to < postgres.FormatLevelNewest {
				previousReleaseAt(t, pool, "previous-2", tc.to)
			}
			second := first.Replacement(helixtest.ReplacementOptions{})
			require.Equal(t, tc.to, postgres.FormatLevel(second.FormatLevel()), "read at launch")
			res := second.Await(second.Attach(h))
			require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
			require.JSONEq(t, `"done"`, string(res.Output))
			require.Equal(t, map[string]int{h.WorkflowID + "/n1": 1}, x.keys, "the tool ran once")
			require.Equal(t, 1, mc.Of(1), "the model call of step 1 ran once")
			require.Len(t, second.Messages(h.SessionID), 4, "user, assistant, tool result, assistant: each commit applied once")
			var checkpoints int
			require.NoError(t, pool.QueryRow(context.WithoutCancel(t.Context()),
				`SELECT count(*) FROM helix.all_checkpoints WHERE session_id = $1`, h.SessionID).Scan(&checkpoints))
			require.Equal(t, 2, checkpoints, "a checkpoint per step")
			var last *string
			require.NoError(t, pool.QueryRow(context.WithoutCancel(t.Context()), `SELECT journal FROM helix.all_checkpoints
				WHERE session_id = $1 ORDER BY created_seq DESC LIMIT 1`, h.SessionID).Scan(&last))
			require.Equal(t, tc.to >= postgres.FormatLevelCheckpointJournals, last != nil, "the last checkpoint carries its step's records")
			if last != nil {
				requireJournalForm(t, *last, tc.to >= postgres.FormatLevelCompactJournals)
			}
			var commits int
			require.NoError(t, pool.QueryRow(context.WithoutCancel(t.Context()), `SELECT count(*) FROM helix.step_journal_records
				WHERE workflow_id = $1 AND name = $2 AND output::jsonb ? 'checkpointId'`, h.WorkflowID, steps.NameCommitStep).Scan(&commits))
			require.Equal(t, 2, commits, "helix.step_journal_records shows both commits' records, whatever their form")
			requireLayoutOf(t, pool, h.SessionID, tc.from >= postgres.FormatLevelKeyedTables)
			requireStartsOnce(t, second.Stream(h.SessionID), 1, "n1")
			second.RequireTranscriptOnce(h.SessionID)
			second.RequireStreamGapFree(h.SessionID)
		})
	}
}

// requireLayoutOf checks that root session id and its stream (which has
// its ID) are keyed or not, and that their messages, checkpoints and chunk
// rows are all in the tables of that layout: the layout of the session's
// creation, whatever the levels of later writes.
func requireLayoutOf(t *testing.T, pool *pgxpool.Pool, id string, keyed bool) {
	t.Helper()
	requireSessionLayout(t, pool, id, keyed)
	var streamKeyed bool
	var text, inKeyed int
	require.NoError(t, pool.QueryRow(context.WithoutCancel(t.Context()), `SELECT st.key IS NOT NULL,
			(SELECT count(*) FROM helix.stream_chunks WHERE stream_id = $1),
			(SELECT count(*) FROM helix.stream_chunks_k WHERE stream_key = st.key)
		FROM helix.streams st WHERE st.stream_id = $1`, id).Scan(&streamKeyed, &text, &inKeyed))
	require.Equal(t, keyed, streamKeyed, "stream %s keyed", id)
	requireRowsIn(t, keyed, text, inKeyed, "stream "+id)
}

// requireJournalForm checks that a checkpoint's journal (migration 00025)
// is compact (FormatLevelCompactJournals: the engine's names coded, a
// commit whose output is its message count alone as the short entry) or
// in the form before it.
func requireJournalForm(t *testing.T, journal string, compact bool) {
	t.Helper()
	short := regexp.MustCompile(`,\[-?\d+,-?\d+\]\]$`).MatchString(journal)
	require.Equal(t, compact, short, "the short commit entry: %s", journal)
	require.Equal(t, !compact, strings.Contains(journal, `"helix.`), "names as strings: %s", journal)
}
