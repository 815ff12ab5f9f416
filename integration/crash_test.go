package integration_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// crashKill describes one kill point: when the parent kills the process,
// what the tables must show at that instant, and which process (by gen)
// executed each model call and each tool call of the target session once
// the recovering process finished it.
type crashKill struct {
	name  string
	point string
	// reached reports that the killed process is stalled at the kill point.
	reached func(ctx context.Context, d *crashDB) (bool, error)
	// atKill asserts, from the tables of the dead process, that the kill
	// landed where intended.
	atKill func(t *testing.T, d *crashDB)
	// modelGens lists per step the gens of the processes that called the
	// model for that step; toolGens per tool call ID the gens of the
	// processes in which its body began.
	modelGens map[int][]int
	toolGens  map[string][]int
	// resyncs is the number of stream_resync chunks the session's stream
	// must hold: one per discarded model attempt.
	resyncs int
}

// The bystander session is stalled mid-stream in its first model call in
// every killed process: nothing of it is committed, its model call runs
// again, everything else once, in the recovering process.
var crashBystanderKill = crashKill{
	modelGens: map[int][]int{1: {1, 2}, 2: {2}, 3: {2}},
	toolGens:  map[string][]int{"call-alpha": {2}, "call-beta": {2}, "call-gamma": {2}},
	resyncs:   1,
}

var crashKills = []crashKill{
	{
		name:  "during_model_call",
		point: crashKillModel,
		reached: func(ctx context.Context, d *crashDB) (bool, error) {
			return d.hasChunk(ctx, crashTarget, 2, helix.ChunkTextDelta)
		},
		atKill: func(t *testing.T, d *crashDB) {
			require.Equal(t, 1, d.checkpointedModelCalls(t, crashTarget), "model step 2 was not checkpointed")
			require.Equal(t, map[int][]int{1: {1}, 2: {1}}, d.modelCalls(t, crashTarget))
		},
		modelGens: map[int][]int{1: {1}, 2: {1, 2}, 3: {2}},
		toolGens:  map[string][]int{"call-alpha": {1}, "call-beta": {1}, "call-gamma": {2}},
		resyncs:   1,
	},
	{
		name:  "after_model_step_before_tools",
		point: crashKillBeforeTools,
		reached: func(ctx context.Context, d *crashDB) (bool, error) {
			started, err := d.hasChunk(ctx, crashTarget, 2, helix.ChunkToolStart)
			if err != nil || !started {
				return false, err
			}
			n, err := d.countCheckpointedModelCalls(ctx, crashTarget)
			return n == 2, err
		},
		atKill: func(t *testing.T, d *crashDB) {
			require.Equal(t, 2, d.checkpointedModelCalls(t, crashTarget), "model step 2 is checkpointed")
			require.NotContains(t, d.checkpointedTools(t, crashTarget), "call-gamma")
			require.NotContains(t, d.toolRuns(t, crashTarget), "call-gamma", "the tool of step 2 had not begun")
		},
		modelGens: map[int][]int{1: {1}, 2: {1}, 3: {2}},
		toolGens:  map[string][]int{"call-alpha": {1}, "call-beta": {1}, "call-gamma": {2}},
	},
	{
		name:  "during_tool",
		point: crashKillInTool,
		reached: func(ctx context.Context, d *crashDB) (bool, error) {
			var began bool
			if err := d.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM crash_tool_runs
				WHERE session_id = $1 AND tool_call_id = 'call-beta' AND phase = 'start')`, crashTarget).Scan(&began); err != nil || !began {
				return false, err
			}
			done, err := d.listCheckpointedTools(ctx, crashTarget)
			return slices.Contains(done, "call-alpha"), err
		},
		atKill: func(t *testing.T, d *crashDB) {
			require.Equal(t, []string{"call-alpha"}, d.checkpointedTools(t, crashTarget),
				"call-alpha completed and was checkpointed, call-beta was running")
			runs := d.toolRuns(t, crashTarget)
			require.Len(t, runs, 2)
			require.Equal(t, []int{1}, runs["call-alpha"].starts)
			require.Equal(t, []int{1}, runs["call-alpha"].dones)
			require.Equal(t, []int{1}, runs["call-beta"].starts)
			require.Empty(t, runs["call-beta"].dones, "call-beta was killed mid-way")
		},
		modelGens: map[int][]int{1: {1}, 2: {2}, 3: {2}},
		toolGens:  map[string][]int{"call-alpha": {1}, "call-beta": {1, 2}, "call-gamma": {2}},
	},
	{
		name:  "between_commit_and_next_step",
		point: crashKillBetween,
		reached: func(ctx context.Context, d *crashDB) (bool, error) {
			return d.hasChunk(ctx, crashTarget, 1, helix.ChunkStepCommitted)
		},
		atKill: func(t *testing.T, d *crashDB) {
			st, err := d.st.LoadState(t.Context(), crashTarget)
			require.NoError(t, err)
			require.Equal(t, 1, st.StepCount, "step 1 is committed")
			require.Equal(t, map[int][]int{1: {1}}, d.modelCalls(t, crashTarget), "step 2 had not begun")
			for _, c := range d.chunks(t, crashTarget) {
				require.Less(t, c.Step, 2, "no chunk of step 2 before the kill: %s", c.Raw)
			}
		},
		modelGens: map[int][]int{1: {1}, 2: {2}, 3: {2}},
		toolGens:  map[string][]int{"call-alpha": {1}, "call-beta": {1}, "call-gamma": {2}},
	},
}

// TestCrashRecovery runs the engine in a child process, kills it with
// SIGKILL at each kill point, and lets a new process finish every session:
// one with the same executor ID, and a replica with another ID that takes
// the dead executor over once its lease expired. It then checks, from the tables, the promises of
// design §1 against an uninterrupted run of the same agent:
//
//   - every session completes, with exactly the reference transcript (no
//     message lost or duplicated) and one checkpoint per step;
//   - a model call or tool call whose step was checkpointed before the kill
//     ran exactly once, in the killed process; the call the kill interrupted
//     ran again, in the recovering process, with the same idempotency key;
//     every tool call's effect completed exactly once;
//   - replaying the stream from sequence 0 gives the reference stream plus
//     one stream_resync (reason crash_recovery) per discarded model attempt,
//     so each committed step's text appears once; every chunk that existed
//     when the process died is still there, byte for byte, unless a later
//     stream_resync covers it.
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	server := serverURL(t)
	ref := crashReference(t, server)
	for _, k := range crashKills {
		for _, to := range crashTakeovers {
			t.Run(k.name+"/"+to.name, func(t *testing.T) {
				t.Parallel()
				began := time.Now()
				d := newCrashDB(t, server)
				killed := startCrashChild(t, d.url, crashModeRun, k.point, 1, to.killedEnv...)
				killed.waitFor(t, "the kill point "+k.point, func(ctx context.Context) (bool, error) {
					stalled, err := d.hasChunk(ctx, crashBystander, 1, helix.ChunkTextDelta)
					if err != nil || !stalled {
						return false, err
					}
					return k.reached(ctx, d)
				})
				killed.kill(t)
				killedAt := d.now(t)
				reachedAt := time.Since(began)
				d.waitGone(t, killed.appName)
				to.afterKill(t, d)

				// The dead process's footprint.
				for _, sid := range crashSessions {
					require.Equal(t, "PENDING", d.workflowStatus(t, sid), "session %s", sid)
				}
				require.Equal(t, 0, d.checkpointedModelCalls(t, crashBystander))
				k.atKill(t, d)
				seen := map[string][]store.StoredChunk{}
				for _, sid := range crashSessions {
					seen[sid] = d.chunks(t, sid)
				}

				recovering := startCrashChild(t, d.url, crashModeRecover, "", 2, to.recoveringEnv...)
				recovering.wait(t)
				t.Logf("killed after %s, recovered after %s", reachedAt.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
				to.check(t, d, killedAt)

				d.requireRecovered(t, crashTarget, k, ref[crashTarget], seen[crashTarget])
				d.requireRecovered(t, crashBystander, crashBystanderKill, ref[crashBystander], seen[crashBystander])
			})
		}
	}
}

// crashTakeover is how the recovering process comes by the dead process's
// sessions.
type crashTakeover struct {
	name string
	// killedEnv and recoveringEnv are the children's extra environment.
	killedEnv, recoveringEnv []string
	// elsewhere: once killed, the dead executor is made to look like a
	// process of another machine (whose pid cannot be checked from here),
	// as when a whole node dies: its sessions move once its lease expired.
	elsewhere bool
}

// crashTakeoverLease is the executor lease of both children in a takeover.
const crashTakeoverLease = 2 * time.Second

var crashTakeovers = []crashTakeover{
	// A restart with the same executor ID: DBOS recovers the ID's workflows
	// at Launch.
	{name: "same_id"},
	// A replica with another executor ID takes the dead one over after
	// its lease.
	{
		name:          "takeover",
		killedEnv:     []string{crashEnvLease + "=" + crashTakeoverLease.String()},
		recoveringEnv: []string{crashEnvLease + "=" + crashTakeoverLease.String(), crashEnvExecutor + "=" + crashTakeoverID},
		elsewhere:     true,
	},
}

// crashTakeoverID is the executor ID of the replica that takes over.
const crashTakeoverID = "crash-exec-b"

func (to crashTakeover) afterKill(t *testing.T, d *crashDB) {
	t.Helper()
	if to.elsewhere {
		d.moveElsewhere(t, crashExecutorID)
	}
}

// check asserts who recovered the dead executor's sessions, and logs how
// long after the kill the takeover came.
func (to crashTakeover) check(t *testing.T, d *crashDB, killedAt time.Time) {
	t.Helper()
	if !to.elsewhere {
		return
	}
	by, at := d.takenOver(t, crashExecutorID)
	require.Equal(t, crashTakeoverID, by, "the live replica took the dead executor over")
	t.Logf("taken over %s after the kill (lease %s)", at.Sub(killedAt).Round(time.Millisecond), crashTakeoverLease)
}

// crashRef is what an uninterrupted run of a session leaves.
type crashRef struct {
	messages []helix.Message
	stream   []string
}

// crashReference runs both sessions without interruption, in this process.
func crashReference(t *testing.T, server string) map[string]crashRef {
	t.Helper()
	d := newCrashDB(t, server)
	rig := &crashRig{pool: d.pool}
	agent := rig.agent()
	e, err := engine.New(t.Context(), engine.Config{DatabaseURL: d.url, ExecutorID: "crash-reference"})
	require.NoError(t, err)
	defer func() { require.NoError(t, e.Shutdown(context.Background())) }()
	require.NoError(t, e.Register(agent))
	require.NoError(t, e.Launch(t.Context()))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ref := map[string]crashRef{}
	for _, sid := range crashSessions {
		h, err := e.Execute(ctx, agent, engine.Input{Message: "Record alpha, beta and gamma."}, &engine.ExecuteOptions{SessionID: sid})
		require.NoError(t, err)
		res, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
		r := crashRef{messages: d.messages(t, sid)}
		for _, c := range d.chunks(t, sid) {
			r.stream = append(r.stream, crashProjection(c))
		}
		require.Len(t, r.messages, 7, "user, then per step the assistant message and its tool results")
		ref[sid] = r
	}
	return ref
}

// requireRecovered asserts the outcome of a session after recovery.
func (d *crashDB) requireRecovered(t *testing.T, sid string, k crashKill, ref crashRef, seen []store.StoredChunk) {
	t.Helper()
	ctx := t.Context()

	// Finished, by the same run and workflow.
	st, err := d.st.LoadState(ctx, sid)
	require.NoError(t, err)
	require.Equal(t, helix.SessionCompleted, st.Status, "session %s: %s", sid, st.Error)
	require.Equal(t, len(crashScript), st.StepCount)
	runs, err := d.st.ListRuns(ctx, sid)
	require.NoError(t, err)
	require.Len(t, runs, 1, "the recovered run is the original run")
	require.Equal(t, helix.RunCompleted, runs[0].Status)
	require.Equal(t, len(crashScript), runs[0].StepCount)
	require.Equal(t, "SUCCESS", d.workflowStatus(t, sid))

	// The transcript of an uninterrupted run: no message lost or repeated.
	msgs := d.messages(t, sid)
	require.Equal(t, ref.messages, msgs, "session %s: transcript", sid)
	results := map[string]int{}
	for _, m := range msgs {
		if m.Role == helix.RoleTool {
			results[m.ToolCallID]++
		}
	}
	require.Equal(t, map[string]int{"call-alpha": 1, "call-beta": 1, "call-gamma": 1}, results, "one result per tool call")
	cps, err := d.st.ListCheckpoints(ctx, sid, &store.ListOptions{Limit: 100})
	require.NoError(t, err)
	var cpSteps []int
	for _, c := range cps.Items {
		cpSteps = append(cpSteps, c.StepCount)
	}
	require.Equal(t, []int{1, 2, 3}, cpSteps, "one checkpoint per step: no step committed twice")

	// Which process executed what.
	require.Equal(t, k.modelGens, d.modelCalls(t, sid), "session %s: gens of the model calls per step", sid)
	runs2 := d.toolRuns(t, sid)
	wf := runs[0].WorkflowID
	starts := map[string][]int{}
	for id, r := range runs2 {
		starts[id] = r.starts
		require.Equal(t, []int{r.starts[len(r.starts)-1]}, r.dones,
			"session %s: %s completed exactly once, in the process of its last attempt", sid, id)
		require.Equal(t, []string{wf + "/" + id}, r.keys, "session %s: %s: one idempotency key across processes", sid, id)
	}
	require.Equal(t, k.toolGens, starts, "session %s: gens of the tool executions per call", sid)

	// The stream, replayed from sequence 0.
	chunks := d.chunks(t, sid)
	var stream []string
	text := map[int]string{}
	var resyncs []store.StoredChunk
	for i, c := range chunks {
		if i > 0 {
			require.Greater(t, c.Sequence, chunks[i-1].Sequence)
		}
		switch ch := c.Chunk.(type) {
		case *helix.StreamResyncChunk:
			require.Equal(t, helix.ResyncCrashRecovery, ch.Reason)
			resyncs = append(resyncs, c)
			continue
		case *helix.TextDeltaChunk:
			text[c.Step] += ch.Delta
		}
		stream = append(stream, crashProjection(c))
	}
	require.Len(t, resyncs, k.resyncs, "session %s: one stream_resync per discarded model attempt", sid)
	for i, s := range crashScript {
		require.Equal(t, s.text(), text[i+1], "session %s: the text of step %d, once", sid, i+1)
	}
	require.Equal(t, ref.stream, stream, "session %s: the stream is the uninterrupted one plus stream_resync", sid)
	require.IsType(t, &helix.StreamEnd{}, chunks[len(chunks)-1].Chunk)

	// What a client could have read before the kill is still there, or a
	// stream_resync says it was withdrawn.
	bySeq := map[int64]store.StoredChunk{}
	for _, c := range chunks {
		bySeq[c.Sequence] = c
	}
	for _, s := range seen {
		if now, ok := bySeq[s.Sequence]; ok {
			require.Equal(t, string(s.Raw), string(now.Raw), "session %s: chunk %d changed", sid, s.Sequence)
			continue
		}
		covered := slices.ContainsFunc(resyncs, func(r store.StoredChunk) bool {
			return r.Chunk.(*helix.StreamResyncChunk).FromSequence <= s.Sequence && s.Sequence < r.Sequence
		})
		require.True(t, covered, "session %s: chunk %d (%s) vanished without a stream_resync", sid, s.Sequence, s.Raw)
	}
}

// crashProjection is what of a chunk two runs of the same script share:
// everything but IDs of runs and checkpoints, and timestamps.
func crashProjection(c store.StoredChunk) string {
	s := fmt.Sprintf("%d %s", c.Step, c.Chunk.ChunkType())
	switch ch := c.Chunk.(type) {
	case *helix.TextDeltaChunk:
		s += fmt.Sprintf(" %q", ch.Delta)
	case *helix.ToolStartChunk:
		s += fmt.Sprintf(" %s %s", ch.ToolCallID, ch.Arguments)
	case *helix.ToolEndChunk:
		s += fmt.Sprintf(" %s %s %q", ch.ToolCallID, ch.Result, ch.Error)
	case *helix.OutputChunk:
		s += " " + string(ch.Output)
	}
	return s
}

// crashDB is one test database with the crash tables, seen from the parent.
type crashDB struct {
	url  string
	pool *pgxpool.Pool
	st   *postgres.Store
}

func newCrashDB(t *testing.T, server string) *crashDB {
	t.Helper()
	return newCrashDBAt(t, pgtest.NewURLOn(t, server))
}

// newCrashDBAt prepares the crash tables in the database at u.
func newCrashDBAt(t *testing.T, u string) *crashDB {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), u)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(t.Context(), crashSchema)
	require.NoError(t, err)
	st, err := postgres.New(pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	d := &crashDB{url: u, pool: pool, st: st}
	t.Cleanup(func() { // before the pool closes (cleanups run last-in first-out)
		if t.Failed() {
			d.dump(t)
		}
	})
	return d
}

// dump logs the durable state a failed crash test leaves: runs, DBOS
// workflows, their recorded steps and notifications, and the tool runs.
func (d *crashDB) dump(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
	defer cancel()
	for _, q := range []string{
		`SELECT session_id, run_id, status, workflow_id FROM helix.runs ORDER BY run_id`,
		`SELECT workflow_uuid, status, name, executor_id, recovery_attempts FROM dbos.workflow_status ORDER BY created_at`,
		`SELECT workflow_uuid, function_id, function_name, error IS NOT NULL AS failed, left(output, 120) FROM dbos.operation_outputs ORDER BY workflow_uuid, function_id`,
		`SELECT workflow_id, id, name, error IS NOT NULL AS failed, left(output, 120) FROM helix.step_journal_records ORDER BY workflow_id, id`,
		`SELECT destination_uuid, topic, left(message, 120) FROM dbos.notifications`,
		`SELECT session_id, tool_call_id, phase, gen FROM crash_tool_runs ORDER BY at`,
	} {
		rows, err := d.pool.Query(ctx, q)
		if err != nil {
			t.Logf("dump %q: %v", q, err)
			continue
		}
		var b strings.Builder
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				fmt.Fprintf(&b, "  (%v)\n", err)
				break
			}
			fmt.Fprintf(&b, "  %v\n", vals)
		}
		rows.Close()
		t.Logf("%s\n%s", q, b.String())
	}
}

// hasChunk reports whether the session's stream holds a chunk of type typ
// at step, reading it through the store (stored rows are packed and
// compacted: store/postgres/chunkpack.go). A session not created yet has
// none.
func (d *crashDB) hasChunk(ctx context.Context, sid string, step int, typ helix.ChunkType) (bool, error) {
	st, err := d.st.LoadState(ctx, sid)
	if errors.Is(err, helix.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for after := int64(0); ; {
		page, err := d.st.ReadChunks(ctx, st.StreamID, after, 500)
		if err != nil || len(page) == 0 {
			return false, err
		}
		for _, c := range page {
			if c.Step == step && c.Chunk.ChunkType() == typ {
				return true, nil
			}
		}
		after = page[len(page)-1].Sequence
	}
}

// chunks reads the session's whole stream from sequence 0.
func (d *crashDB) chunks(t *testing.T, sid string) []store.StoredChunk {
	t.Helper()
	st, err := d.st.LoadState(t.Context(), sid)
	require.NoError(t, err)
	var all []store.StoredChunk
	for after := int64(0); ; {
		page, err := d.st.ReadChunks(t.Context(), st.StreamID, after, 500)
		require.NoError(t, err)
		if len(page) == 0 {
			return all
		}
		all = append(all, page...)
		after = page[len(page)-1].Sequence
	}
}

func (d *crashDB) messages(t *testing.T, sid string) []helix.Message {
	t.Helper()
	page, err := d.st.GetMessages(t.Context(), sid, &store.GetMessagesOptions{Limit: store.MaxPageSize})
	require.NoError(t, err)
	return page.Messages
}

// modelCalls returns per step the gens of the processes that called the
// model for it.
func (d *crashDB) modelCalls(t *testing.T, sid string) map[int][]int {
	t.Helper()
	rows, err := d.pool.Query(t.Context(), `SELECT step, gen FROM crash_model_calls WHERE session_id = $1 ORDER BY step, gen, at`, sid)
	require.NoError(t, err)
	defer rows.Close()
	calls := map[int][]int{}
	for rows.Next() {
		var step, gen int
		require.NoError(t, rows.Scan(&step, &gen))
		calls[step] = append(calls[step], gen)
	}
	require.NoError(t, rows.Err())
	return calls
}

// crashToolRuns are the recorded executions of one tool call: the gens of
// the processes in which its body began and in which it completed, and the
// idempotency keys it saw.
type crashToolRuns struct {
	starts, dones []int
	keys          []string
}

func (d *crashDB) toolRuns(t *testing.T, sid string) map[string]crashToolRuns {
	t.Helper()
	rows, err := d.pool.Query(t.Context(), `SELECT tool_call_id, key, phase, gen FROM crash_tool_runs
		WHERE session_id = $1 ORDER BY tool_call_id, gen, at`, sid)
	require.NoError(t, err)
	defer rows.Close()
	runs := map[string]crashToolRuns{}
	for rows.Next() {
		var id, key, phase string
		var gen int
		require.NoError(t, rows.Scan(&id, &key, &phase, &gen))
		r := runs[id]
		if phase == "start" {
			r.starts = append(r.starts, gen)
		} else {
			r.dones = append(r.dones, gen)
		}
		if !slices.Contains(r.keys, key) {
			r.keys = append(r.keys, key)
		}
		runs[id] = r
	}
	require.NoError(t, rows.Err())
	return runs
}

// checkpoints returns the DBOS step outputs recorded for the session's
// workflow, by step name, decoded to JSON.
func (d *crashDB) checkpoints(ctx context.Context, sid string) (map[string][]json.RawMessage, error) {
	rows, err := d.pool.Query(ctx, `SELECT name, output, ser FROM (
			SELECT o.function_id AS id, o.function_name AS name, o.output, COALESCE(o.serialization, '') AS ser
			FROM dbos.operation_outputs o JOIN helix.runs r ON r.workflow_id = o.workflow_uuid
			WHERE r.session_id = $1 AND o.error IS NULL
			UNION ALL
			SELECT j.id, j.name, j.output, 'portable_json'
			FROM helix.step_journal_records j JOIN helix.runs r ON r.workflow_id = j.workflow_id
			WHERE r.session_id = $1 AND j.error IS NULL) s ORDER BY id`, sid)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]json.RawMessage{}
	for rows.Next() {
		var name, ser string
		var output *string
		if err := rows.Scan(&name, &output, &ser); err != nil {
			return nil, err
		}
		var raw []byte
		if output != nil {
			raw = []byte(*output)
			if ser != "portable_json" { // DBOS_JSON: base64 of the JSON
				if raw, err = base64.StdEncoding.DecodeString(*output); err != nil {
					return nil, fmt.Errorf("step %s output: %w", name, err)
				}
			}
		}
		out[name] = append(out[name], raw)
	}
	return out, rows.Err()
}

func (d *crashDB) countCheckpointedModelCalls(ctx context.Context, sid string) (int, error) {
	cps, err := d.checkpoints(ctx, sid)
	return len(cps[steps.NameCallModel]), err
}

func (d *crashDB) checkpointedModelCalls(t *testing.T, sid string) int {
	t.Helper()
	n, err := d.countCheckpointedModelCalls(t.Context(), sid)
	require.NoError(t, err)
	return n
}

// listCheckpointedTools lists the tool call IDs whose tool step is
// checkpointed.
func (d *crashDB) listCheckpointedTools(ctx context.Context, sid string) ([]string, error) {
	cps, err := d.checkpoints(ctx, sid)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, raw := range cps[steps.NameRunTool] {
		var r steps.ToolResult
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, err
		}
		ids = append(ids, r.ToolCallID)
	}
	slices.Sort(ids)
	return ids, nil
}

func (d *crashDB) checkpointedTools(t *testing.T, sid string) []string {
	t.Helper()
	ids, err := d.listCheckpointedTools(t.Context(), sid)
	require.NoError(t, err)
	return ids
}

// workflowStatus is the DBOS status of the session's (only) workflow.
func (d *crashDB) workflowStatus(t *testing.T, sid string) string {
	t.Helper()
	var status string
	require.NoError(t, d.pool.QueryRow(t.Context(), `SELECT w.status FROM dbos.workflow_status w
		JOIN helix.runs r ON r.workflow_id = w.workflow_uuid WHERE r.session_id = $1`, sid).Scan(&status))
	return status
}

// now is the database's clock.
func (d *crashDB) now(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, d.pool.QueryRow(t.Context(), `SELECT now()`).Scan(&now))
	return now
}

// moveElsewhere makes an executor's row look like a process on another
// machine: its liveness can no longer be checked by pid, only by its lease.
func (d *crashDB) moveElsewhere(t *testing.T, id string) {
	t.Helper()
	tag, err := d.pool.Exec(t.Context(), `UPDATE helix.executors SET hostname = 'another-host', pid_namespace = 'another-machine'
		WHERE executor_id = $1`, id)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected(), "executor %s is recorded", id)
}

// takenOver reads which executor took id over, and when.
func (d *crashDB) takenOver(t *testing.T, id string) (string, time.Time) {
	t.Helper()
	var by string
	var at time.Time
	require.NoError(t, d.pool.QueryRow(t.Context(), `SELECT coalesce(taken_over_by, ''), coalesce(taken_over_at, 'epoch')
		FROM helix.executors WHERE executor_id = $1`, id).Scan(&by, &at))
	return by, at
}

// waitGone waits until the server has dropped every connection of a killed
// process, as it does when it notices the closed sockets.
func (d *crashDB) waitGone(t *testing.T, appName string) {
	t.Helper()
	crashPoll(t, "the killed process's connections to close", nil, func(ctx context.Context) (bool, error) {
		var n int
		err := d.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, appName).Scan(&n)
		return n == 0, err
	})
}

// crashChild is a child process running the engine.
type crashChild struct {
	cmd     *exec.Cmd
	appName string
	out     *crashLog
	done    chan struct{} // closed when the process exited and its output is read
	err     error         // the result of Wait, set before done is closed
}

// startCrashChild re-executes the test binary as a crash child (see init in
// crash_child_test.go). Its connections carry an application_name naming
// its gen.
func startCrashChild(t *testing.T, dbURL, mode, point string, gen int, env ...string) *crashChild {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	appName := fmt.Sprintf("crash-%s-gen%d", t.Name(), gen)
	if len(appName) > 63 {
		appName = appName[len(appName)-63:]
	}
	q := u.Query()
	q.Set("application_name", appName)
	u.RawQuery = q.Encode()

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(),
		crashEnvMode+"="+mode,
		crashEnvURL+"="+u.String(),
		crashEnvPoint+"="+point,
		fmt.Sprintf("%s=%d", crashEnvGen, gen),
	)
	cmd.Env = append(cmd.Env, env...)
	// Held open until Wait: the child exits when it reads EOF, should this
	// process die without killing it.
	_, err = cmd.StdinPipe()
	require.NoError(t, err)
	c := &crashChild{cmd: cmd, appName: appName, out: &crashLog{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = c.out, c.out
	require.NoError(t, cmd.Start())
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = cmd.Process.Kill()
			<-c.done
		}
		if t.Failed() {
			t.Logf("output of the %s child (gen %d):\n%s", mode, gen, c.out)
		}
	})
	return c
}

// waitFor polls cond until it holds, failing the test if the child exits
// first or the deadline passes.
func (c *crashChild) waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	crashPoll(t, what, c.done, cond)
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *crashChild) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the killed child did not exit")
	}
	ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the child died of SIGKILL, not %v: %v", c.cmd.ProcessState, c.err)
}

// wait waits for the child to exit and requires success.
func (c *crashChild) wait(t *testing.T) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(45 * time.Second):
		// SIGQUIT makes the Go runtime print every goroutine's stack: the
		// output logged at cleanup shows where the child is stuck.
		_ = c.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
		}
		t.Fatal("the recovering child did not finish (its goroutines are in its output below)")
	}
	require.NoError(t, c.err, "the recovering child failed")
}

// crashPoll polls cond every few milliseconds until it holds; exited, when
// closed, means it never will.
func crashPoll(t *testing.T, what string, exited <-chan struct{}, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond(ctx)
		if err != nil && ctx.Err() == nil {
			require.NoError(t, err, "waiting for %s", what)
		}
		if ok {
			return
		}
		select {
		case <-exited:
			t.Fatalf("the child exited while waiting for %s", what)
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// crashLog collects a child's output.
type crashLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *crashLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *crashLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

var _ io.Writer = (*crashLog)(nil)
