package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/helixtest"
	"github.com/helix-agents/helix-dbos/store"
)

// A step whose tools run in-process holds its start chunks (step_start and
// its tool_starts) for its commit (steps.HeldStarts). These tests check
// what a reader of the stream relies on: each start chunk is there once,
// before its tool's other chunks, across crashes, and while a tool runs.

// modelCalls counts a model's calls per step: a step's count above 1 is a
// model call made twice.
type modelCalls = helixtest.ModelCalls

// requireStartsOnce fails unless the session's stream holds step's
// step_start once and, for each of calls, its tool_start once, after the
// step_start and before every other chunk of the call (its events and its
// tool_end, which must be there).
func requireStartsOnce(t *testing.T, chunks []store.StoredChunk, step int, calls ...string) {
	t.Helper()
	stepStarts := 0
	var stepStart int64
	starts, ends := map[string][]int64{}, map[string][]int64{}
	events := map[string][]int64{}
	for _, c := range chunks {
		switch ch := c.Chunk.(type) {
		case *helix.StepStartChunk:
			if ch.Step == step {
				stepStarts++
				stepStart = c.Sequence
			}
		case *helix.ToolStartChunk:
			starts[ch.ToolCallID] = append(starts[ch.ToolCallID], c.Sequence)
		case *helix.ToolEndChunk:
			ends[ch.ToolCallID] = append(ends[ch.ToolCallID], c.Sequence)
		case *helix.CustomEventChunk:
			if ch.Step == step {
				var who struct{ Call string }
				require.NoError(t, json.Unmarshal(ch.Data, &who))
				events[who.Call] = append(events[who.Call], c.Sequence)
			}
		}
	}
	require.Equal(t, 1, stepStarts, "step_start of step %d", step)
	for _, id := range calls {
		require.Len(t, starts[id], 1, "tool_start of %s", id)
		require.Len(t, ends[id], 1, "tool_end of %s", id)
		require.Less(t, stepStart, starts[id][0], "step_start before the tool_start of %s", id)
		require.Less(t, starts[id][0], ends[id][0], "tool_start of %s before its tool_end", id)
		for _, seq := range events[id] {
			require.Less(t, starts[id][0], seq, "tool_start of %s before its event", id)
		}
	}
}

// A crash after the model call's record: the replacement does not call
// the model again, and the stream holds the step's start chunks once,
// before the tool_ends, whether the lost execution wrote them (a tool's
// event did, before the crash inside the tool) or left them to its commit.
func TestHeldStartChunksAcrossACrash(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		point helixtest.CrashPoint
		emit  bool
	}{
		{"after the model call, nothing written", helixtest.AfterModelCall(1), false},
		{"inside a tool, after its event wrote them", helixtest.AfterTool("b"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tool := func(name string) *helix.Tool {
				return helix.MustNewTool(name, "notes a call", func(_ context.Context, _ struct{}, tc2 helix.ToolContext) (string, error) {
					if tc.emit {
						if err := tc2.Emit("progress", map[string]string{"Call": tc2.ToolCallID()}); err != nil {
							return "", err
						}
					}
					return "done", nil
				})
			}
			var mc modelCalls
			agent := &helix.Agent{Name: "held-starts", Tools: []*helix.Tool{tool("a"), tool("b")},
				Model: mc.Wrap(script(calls(call("ca", "a", `{}`), call("cb", "b", `{}`)), text("done")))}
			e := helixtest.NewEngine(t, helixtest.EngineOptions{CrashAt: &tc.point}, agent)
			h := e.Start(agent, "go")
			e.AwaitCrash()

			r := e.Replacement(helixtest.ReplacementOptions{})
			res := r.Await(r.Attach(h))
			require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
			require.Equal(t, 1, mc.Of(1), "model calls of step 1")
			chunks := r.Stream(h.SessionID)
			requireStartsOnce(t, chunks, 1, "ca", "cb")
			r.RequireStreamGapFree(h.SessionID)
			r.RequireTranscriptOnce(h.SessionID)
		})
	}
}

// A tool that outlasts steps.StartChunksDelay: its tool_start reaches a
// live reader while it runs (the tool ends only once the test saw it).
func TestHeldStartChunksReachAReaderWhileAToolRuns(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	slow := helix.MustNewTool("slow", "waits for the test", func(ctx context.Context, _ struct{}, _ helix.ToolContext) (string, error) {
		select {
		case <-release:
			return "done", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	agent := &helix.Agent{Name: "held-starts-slow", Tools: []*helix.Tool{slow},
		Model: script(calls(call("c1", "slow", `{}`)), text("done"))}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// The tool blocks until the reader saw its tool_start: without it, the
	// read times out.
	for c, err := range h.Stream(ctx) {
		require.NoError(t, err, "no tool_start reached the reader while the tool ran")
		if s, ok := c.Chunk.(*helix.ToolStartChunk); ok && s.ToolCallID == "c1" {
			break
		}
	}
	close(release)
	require.Equal(t, helix.AgentCompleted, result(t, h).Status)
	requireStartsOnce(t, streamOf(t, e, h.SessionID), 1, "c1")
}

// A fast tool's event comes after its tool_start: the event writes the
// held start chunks first.
func TestHeldStartChunksPrecedeAToolsEvent(t *testing.T) {
	t.Parallel()
	tool := helix.MustNewTool("emitter", "emits an event", func(_ context.Context, _ struct{}, tc helix.ToolContext) (string, error) {
		return "done", tc.Emit("progress", map[string]string{"Call": tc.ToolCallID()})
	})
	agent := &helix.Agent{Name: "held-starts-event", Tools: []*helix.Tool{tool},
		Model: script(calls(call("c1", "emitter", `{}`), call("c2", "emitter", `{}`)), text("done"))}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, h).Status)
	chunks := streamOf(t, e, h.SessionID)
	events := 0
	for _, c := range chunks {
		if _, ok := c.Chunk.(*helix.CustomEventChunk); ok {
			events++
		}
	}
	require.Equal(t, 2, events, "one event per call")
	requireStartsOnce(t, chunks, 1, "c1", "c2")
}

// streamOf returns every chunk of the session's stream.
func streamOf(t *testing.T, e *engine.Engine, sessionID string) []store.StoredChunk {
	t.Helper()
	st, err := engine.StoreOf(e).LoadState(t.Context(), sessionID)
	require.NoError(t, err)
	chunks, err := engine.StoreOf(e).ReadChunks(t.Context(), st.StreamID, 0, 1000)
	require.NoError(t, err)
	require.NotEmpty(t, chunks, fmt.Sprintf("stream of %s", sessionID))
	return chunks
}
