package postgres_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// markerStep is one step commit of the marker tests, built as
// steps.CommitStep builds a real one.
type markerStep struct {
	held     bool            // the step's start chunks are written by its commit
	tools    int             // tool calls
	failTool int             // 1-based: that tool fails (0: none)
	args     string          // arguments of every call ("" for {"i":N})
	patch    bool            // a state patch
	output   json.RawMessage // the step completes with this output (nil: continues)
	end      bool            // with output: the stream ends
	interupt bool            // a run_interrupted chunk closes the step
}

// commitMarkerStep commits step of sess (agent agentID, writing into
// streamID) and returns the chunks it wrote, as their raw JSON (the
// stream's end left out: the store stamps it), and the stream's latest
// sequence before.
func commitMarkerStep(t *testing.T, st *postgres.Store, sess, runID, agentType string, step int, s markerStep) (raws []string, before int64) {
	t.Helper()
	ctx := t.Context()
	state, err := st.LoadState(ctx, sess)
	require.NoError(t, err)
	before, err = st.LatestSequence(ctx, state.StreamID)
	require.NoError(t, err)
	base := func() helix.Base { return helix.Base{AgentID: sess, AgentType: agentType, Step: step} }
	stepID := fmt.Sprintf("%s:%d", runID, step)
	var calls []helix.ToolCall
	for i := range s.tools {
		args := fmt.Sprintf(`{"i":%d}`, i)
		if s.args != "" {
			args = s.args
		}
		calls = append(calls, helix.ToolCall{ID: fmt.Sprintf("call_%d_%d", step, i), Name: "noop", Arguments: json.RawMessage(args)})
	}
	msgs := []helix.Message{helix.AssistantMessage("", calls...)}
	var chunks []helix.Chunk
	if s.held {
		chunks = append(chunks, &helix.StepStartChunk{Base: base(), StepID: stepID})
		for _, c := range calls {
			chunks = append(chunks, &helix.ToolStartChunk{Base: base(), ToolCallID: c.ID, ToolName: c.Name, Arguments: c.Arguments})
		}
	}
	executed := true
	for i, c := range calls {
		end := &helix.ToolEndChunk{Base: base(), ToolCallID: c.ID, ToolName: c.Name, Result: json.RawMessage(fmt.Sprintf(`{"ok":"ok %d"}`, i)),
			ProviderExecuted: &executed}
		content := string(end.Result)
		if i+1 == s.failTool {
			end.Result, end.Error, end.ErrorCode = json.RawMessage("null"), "boom <"+c.ID+">", "TOOL_FAILED"
			content = `{"error":"boom"}`
		}
		chunks = append(chunks, end)
		msgs = append(msgs, helix.ToolResultMessage(c.ID, c.Name, content))
	}
	var patches []helix.PatchOp
	if s.patch {
		patches = []helix.PatchOp{{Op: "add", Path: "/n", Value: json.RawMessage(fmt.Sprint(step))}}
		chunks = append(chunks, &helix.StatePatchChunk{Base: base(), Patches: patches})
	}
	usage := helix.Usage{InputTokens: 10 * step, OutputTokens: step}
	chunks = append(chunks, &helix.StepEndChunk{Base: base(), StepID: stepID, Usage: &usage, FinishReason: "tool-calls"})
	var closing []helix.Chunk
	commit := store.StepCommit{SessionID: sess, RunID: runID, Step: step, AgentType: agentType, Messages: msgs, Patches: patches,
		Chunks: chunks, Complete: s.output != nil, Output: s.output, EndStream: s.end,
		Usage: []store.UsageRecord{{SourceType: store.UsageModel, SourceName: agentType, InputTokens: usage.InputTokens,
			OutputTokens: usage.OutputTokens, Success: true, Key: "model:" + stepID}},
		Closing: func(cl store.StepClosing) []helix.Chunk {
			closing = []helix.Chunk{
				&helix.CheckpointCreatedChunk{Base: base(), RunID: runID, CheckpointID: cl.CheckpointID, StepCount: step},
				&helix.StepCommittedChunk{Base: base(), RunID: runID, StepID: stepID, CheckpointID: cl.CheckpointID},
			}
			if s.output != nil {
				closing = append(closing, &helix.OutputChunk{Base: base(), Output: s.output})
			}
			if s.interupt {
				cp := cl.CheckpointID
				closing = append(closing, &helix.RunInterruptedChunk{Base: base(), RunID: runID, CheckpointID: &cp, Reason: "stop"})
			}
			return closing
		}}
	_, err = st.CommitStep(ctx, commit)
	require.NoError(t, err)
	for _, c := range append(chunks, closing...) {
		b, err := json.Marshal(c)
		require.NoError(t, err)
		raws = append(raws, string(b))
	}
	return raws, before
}

// requireReadsBack reads the stream from before and from every sequence
// of the step's chunks: each read gives the step's chunks from there,
// byte for byte, at their sequences.
func requireReadsBack(t *testing.T, st *postgres.Store, streamID string, before int64, raws []string) {
	t.Helper()
	for from := range raws {
		got, err := st.ReadChunks(t.Context(), streamID, before+int64(from), 0)
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(got), len(raws)-from)
		for i, want := range raws[from:] {
			require.Equal(t, before+int64(from+i)+1, got[i].Sequence)
			require.Equal(t, want, string(got[i].Raw), "chunk %d of the step, read after %d", from+i, before+int64(from))
		}
	}
}

// markerRows counts the stream's marker rows (format 4).
func markerRows(t *testing.T, st *postgres.Store, streamID string) int {
	var n int
	require.NoError(t, st.Pool().QueryRow(t.Context(), `SELECT count(*) FROM helix.stream_chunks c JOIN helix.streams t ON t.key = c.stream_key
		WHERE t.stream_id = $1 AND left(c.chunk::text, 3) = '[4,'`, streamID).Scan(&n))
	return n
}

// markerSession creates session sess of agentType (a sub-agent of parent
// when not empty) with a run and a user message, and returns the run's
// ID.
func markerSession(t *testing.T, st *postgres.Store, sess, agentType, parent string) string {
	t.Helper()
	ctx := t.Context()
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: sess, AgentType: agentType, ParentSessionID: parent})
	require.NoError(t, err)
	run, err := st.CreateRun(ctx, store.CreateRunParams{RunID: sess + "-run", SessionID: sess})
	require.NoError(t, err)
	_, err = st.AppendMessages(ctx, sess, []helix.Message{helix.UserMessage("hi")})
	require.NoError(t, err)
	return run.RunID
}

// TestMarkerRowsReadBackByteForByte: every lifecycle combination of a
// step's commit reads back, from every sequence inside its rows, as the
// chunks the commit built, byte for byte; the common ones are marker rows
// (the others coded rows), and a commit without the session's agent type
// writes none.
func TestMarkerRowsReadBackByteForByte(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		step   markerStep
		marker bool // the commit's row is a marker
	}{
		{"no tools", markerStep{}, true},
		{"one tool", markerStep{tools: 1}, true},
		{"one tool, held starts", markerStep{held: true, tools: 1}, true},
		{"two tools, held starts", markerStep{held: true, tools: 2}, true},
		{"three tools", markerStep{tools: 3}, true},
		{"three tools, the second fails", markerStep{held: true, tools: 3, failTool: 2}, true},
		{"a state patch", markerStep{tools: 1, patch: true}, true},
		{"arguments jsonb reorders", markerStep{held: true, tools: 2, args: `{"zz":1,"a":[1.50,"<x>"],"b":{"y":null,"x":true}}`}, true},
		{"arguments with numbers jsonb rewrites", markerStep{held: true, tools: 1, args: `{"n":1e2}`}, false},
		{"structured output", markerStep{tools: 1, output: json.RawMessage(`{"answer":"42"}`)}, true},
		{"output and stream end", markerStep{held: true, output: json.RawMessage(`"done"`), end: true}, true},
		{"interrupt", markerStep{held: true, tools: 1, interupt: true}, true},
	}
	{
		st := newTestStore(t)
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				sess := fmt.Sprintf("marker-%d", i)
				runID := markerSession(t, st, sess, "bench", "")
				for step := 1; step <= 2; step++ {
					s := tc.step
					if step == 1 {
						s.output, s.end, s.args = nil, false, "" // the first step continues; the second is the case
					}
					raws, before := commitMarkerStep(t, st, sess, runID, "bench", step, s)
					requireReadsBack(t, st, sess, before, raws)
				}
				want := 1 // the first step's
				if tc.marker {
					want = 2
				}
				require.Equal(t, want, markerRows(t, st, sess))
			})
		}
	}
	t.Run("without the agent type", func(t *testing.T) {
		st := newTestStore(t)
		runID := markerSession(t, st, "marker-no-type", "bench", "")
		raws, before := commitMarkerStep(t, st, "marker-no-type", runID, "", 1, markerStep{tools: 1})
		requireReadsBack(t, st, "marker-no-type", before, raws)
		require.Zero(t, markerRows(t, st, "marker-no-type"))
	})
}

// TestMarkerRowsOfASubAgentInItsParentsStream: a sub-agent's steps write
// into its parent's stream with its own run; their markers find their
// checkpoints through the run's session (and keep the sub-agent's
// agentId), and truncating the sub-agent's messages (a re-spawn) rewrites
// its markers in the parent's stream as rows of format 3: the stream
// reads the same, and no marker names a checkpoint that is gone.
func TestMarkerRowsOfASubAgentInItsParentsStream(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	prun := markerSession(t, st, "marker-parent", "boss", "")
	crun := markerSession(t, st, "marker-child", "helper", "marker-parent")

	var all []string
	add := func(raws []string, _ int64) { all = append(all, raws...) }
	add(commitMarkerStep(t, st, "marker-parent", prun, "boss", 1, markerStep{held: true, tools: 1}))
	add(commitMarkerStep(t, st, "marker-child", crun, "helper", 1, markerStep{held: true, tools: 2}))
	add(commitMarkerStep(t, st, "marker-child", crun, "helper", 2, markerStep{tools: 1}))
	add(commitMarkerStep(t, st, "marker-parent", prun, "boss", 2, markerStep{tools: 1}))
	add(commitMarkerStep(t, st, "marker-child", crun, "helper", 3, markerStep{held: true, tools: 1}))
	requireReadsBack(t, st, "marker-parent", 0, all)
	require.Equal(t, 5, markerRows(t, st, "marker-parent"))
	var childRows int
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM helix.stream_chunks c JOIN helix.streams t ON t.key = c.stream_key WHERE t.stream_id = 'marker-parent'
		AND run_id = 'marker-child-run' AND chunk::text LIKE '%marker-child%'`).Scan(&childRows))
	require.Equal(t, 3, childRows, "the sub-agent's rows keep its agentId")

	// Keep the sub-agent's first step (its input and 3 messages).
	require.NoError(t, st.TruncateMessages(ctx, "marker-child", 4))
	requireReadsBack(t, st, "marker-parent", 0, all)
	require.Equal(t, 3, markerRows(t, st, "marker-parent"), "the child's steps 2 and 3 are rows of format 3 now")
	info, err := st.GetStreamInfo(ctx, "marker-parent")
	require.NoError(t, err)
	require.Zero(t, info.TruncationEpoch, "the stream reads the same: no truncation")
	require.Equal(t, int64(len(all)), info.ChunkCount)

	// All of it.
	require.NoError(t, st.TruncateMessages(ctx, "marker-child", 0))
	requireReadsBack(t, st, "marker-parent", 0, all)
	require.Equal(t, 2, markerRows(t, st, "marker-parent"), "the parent's")
}

// TestMarkerWithoutItsCheckpointIsAnError: a marker row whose checkpoint
// was removed without it (by hand: no store path does) reads as an error
// that names the row, never as other chunks.
func TestMarkerWithoutItsCheckpointIsAnError(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	runID := markerSession(t, st, "marker-gone", "bench", "")
	raws, _ := commitMarkerStep(t, st, "marker-gone", runID, "bench", 1, markerStep{held: true, tools: 1})
	_, err := st.Pool().Exec(ctx, `DELETE FROM helix.checkpoints WHERE session_key = (SELECT key FROM helix.sessions WHERE session_id = 'marker-gone')`)
	require.NoError(t, err)
	_, err = st.ReadChunks(ctx, "marker-gone", 0, 0)
	require.ErrorContains(t, err, fmt.Sprintf("stream row %d: a marker row (format 4) whose checkpoint is gone", len(raws)))
	require.False(t, strings.Contains(err.Error(), "panic"))
}

// TestDeletingASubSessionKeepsItsParentsStream: deleting a sub-session (and
// its own sub-sessions) with DeleteSession removes the checkpoints and
// messages its marker rows in the parent's stream render from; they are
// rewritten as rows of format 3 first, so the parent's stream reads the
// same, byte for byte, and the parent's own markers stay.
func TestDeletingASubSessionKeepsItsParentsStream(t *testing.T) {
	t.Parallel()
	st := newTestStore(t)
	prun := markerSession(t, st, "del-parent", "boss", "")
	crun := markerSession(t, st, "del-child", "helper", "del-parent")
	grun := markerSession(t, st, "del-grandchild", "aide", "del-child")

	var all []string
	add := func(raws []string, _ int64) { all = append(all, raws...) }
	add(commitMarkerStep(t, st, "del-parent", prun, "boss", 1, markerStep{held: true, tools: 1}))
	add(commitMarkerStep(t, st, "del-child", crun, "helper", 1, markerStep{held: true, tools: 2}))
	add(commitMarkerStep(t, st, "del-grandchild", grun, "aide", 1, markerStep{held: true, tools: 1}))
	add(commitMarkerStep(t, st, "del-parent", prun, "boss", 2, markerStep{tools: 1}))
	requireReadsBack(t, st, "del-parent", 0, all)
	require.Equal(t, 4, markerRows(t, st, "del-parent"))

	require.NoError(t, st.DeleteSession(t.Context(), "del-child"))
	_, err := st.LoadState(t.Context(), "del-grandchild")
	require.ErrorIs(t, err, helix.ErrNotFound, "the sub-session's own sub-sessions go with it")
	requireReadsBack(t, st, "del-parent", 0, all)
	require.Equal(t, 2, markerRows(t, st, "del-parent"), "the parent's own markers stay")
}
