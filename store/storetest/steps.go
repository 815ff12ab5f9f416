package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// stepSession creates a root session with one running run.
func stepSession(t *testing.T, s Store, suffix string) (*store.SessionState, *store.Run) {
	t.Helper()
	st := newSession(t, s, suffix)
	run, err := s.CreateRun(t.Context(), store.CreateRunParams{RunID: st.SessionID + "-run-1", SessionID: st.SessionID})
	require.NoError(t, err)
	return st, run
}

// labels reads every chunk of a stream (without waiting) as labels.
func labels(ctx context.Context, t *testing.T, s Store, streamID string) []string {
	t.Helper()
	chunks, err := s.ReadChunks(ctx, streamID, 0, 1000)
	require.NoError(t, err)
	out := make([]string, len(chunks))
	for i, c := range chunks {
		out[i] = label(c.Chunk)
	}
	return out
}

// closing builds the chunks that follow a checkpoint in a test commit.
func closing(agent string, step int) func(store.StepClosing) []helix.Chunk {
	return func(c store.StepClosing) []helix.Chunk {
		out := []helix.Chunk{delta(agent, step, "cp:"+c.CheckpointID)}
		if c.Interrupted {
			out = append(out, delta(agent, step, "interrupted:"+c.InterruptReason))
		}
		return out
	}
}

var stepCases = map[string]func(t *testing.T, s Store){
	"CommitWritesTheWholeStep": func(t *testing.T, s Store) {
		ctx := t.Context()
		st, run := stepSession(t, s, "commit")
		_, err := s.AppendMessages(ctx, st.SessionID, userMsgs("hi"))
		require.NoError(t, err)
		ms := int64(7)
		res, err := s.CommitStep(ctx, store.StepCommit{
			SessionID: st.SessionID, RunID: run.RunID, Step: 1,
			Messages: []helix.Message{helix.AssistantMessage("calling"), helix.ToolResultMessage("c1", "t", `{"ok":true}`)},
			Patches:  []helix.PatchOp{{Op: "add", Path: "/n", Value: raw(`1`)}, {Op: "remove", Path: "/missing"}},
			Usage: []store.UsageRecord{
				{SourceType: store.UsageModel, SourceName: "m", InputTokens: 3, OutputTokens: 4, Success: true, Key: "model:1"},
				{SourceType: store.UsageTool, SourceName: "t", DurationMS: &ms, Success: true, Key: "tool:c1"},
			},
			Chunks:  []helix.Chunk{toolStart(st.SessionID, 1, "c1"), delta(st.SessionID, 1, "end")},
			Closing: closing(st.SessionID, 1),
		})
		require.NoError(t, err)
		require.False(t, res.Interrupted)
		require.Equal(t, 3, res.MessageCount)
		require.Equal(t, int64(2), res.CheckpointSequence, "the checkpoint points at the last chunk before it")
		require.Equal(t, int64(3), res.LatestSequence)
		require.Len(t, res.Warnings, 1, "the remove of a missing path is skipped and reported")

		got, err := s.LoadState(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, helix.SessionActive, got.Status)
		require.Equal(t, 1, got.StepCount)
		require.Equal(t, 3, got.MessageCount)
		require.Equal(t, res.Version, got.Version)
		require.Equal(t, res.CheckpointID, got.CheckpointID, "the commit moves the checkpoint pointer")
		jsonEq(t, `{"n":1}`, got.CustomState)

		cp, err := s.GetLatestCheckpoint(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, res.CheckpointID, cp.ID)
		require.Equal(t, 1, cp.StepCount)
		require.Equal(t, 3, cp.MessageCount)
		require.Equal(t, int64(2), *cp.StreamSequence)
		jsonEq(t, `{"n":1}`, cp.CustomState)

		usage, err := s.ListUsage(ctx, st.SessionID)
		require.NoError(t, err)
		require.Len(t, usage, 2)
		require.Equal(t, run.RunID, usage[0].RunID, "usage defaults to the commit's run and step")
		require.Equal(t, 1, usage[0].Step)
		require.Equal(t, 3, usage[0].InputTokens)
		require.Equal(t, int64(7), *usage[1].DurationMS)

		r, err := s.GetRun(ctx, run.RunID)
		require.NoError(t, err)
		require.Equal(t, helix.RunRunning, r.Status)
		require.Equal(t, 1, r.StepCount)

		require.Equal(t, []string{"c1", "end", "cp:" + res.CheckpointID}, labels(ctx, t, s, st.StreamID))
		msgs, err := s.GetMessages(ctx, st.SessionID, nil)
		require.NoError(t, err)
		require.Len(t, msgs.Messages, 3)
		require.Equal(t, "calling", msgs.Messages[1].Content)
	},
	"CommitUsageReadsBackAndOutlivesItsCheckpoint": func(t *testing.T, s Store) {
		// A commit's usage records are stored compactly (the run and step
		// left out where they are the commit's); each reads back as it was
		// given, in order, and survives the truncation that removes its
		// checkpoint.
		ctx := t.Context()
		st, run := stepSession(t, s, "usage")
		ms, wait := int64(12), 2.5
		step1 := []store.UsageRecord{
			{SourceType: store.UsageModel, SourceName: "m", InputTokens: 3, OutputTokens: 4, CachedTokens: 2,
				CacheWriteTokens: 1, Success: true, Key: "model:" + run.RunID + ":1"},
			{SourceType: store.UsageTool, SourceName: "t", DurationMS: &ms, Success: false, Key: "tool:" + run.RunID + ":1:c1"},
			{RunID: "other-run", Step: 7, SourceType: store.UsageClientToolWaitMS, Value: &wait, Success: true,
				Key: "wait:other-run:7:c~2"},
			{SourceType: store.UsageTool, SourceName: "t", Success: true, Key: "plain"},
		}
		step2 := []store.UsageRecord{{SourceType: store.UsageModel, SourceName: "m", InputTokens: 9, Success: true,
			Key: "model:" + run.RunID + ":2"}}
		_, err := s.AppendMessages(ctx, st.SessionID, userMsgs("hi"))
		require.NoError(t, err)
		for i, u := range [][]store.UsageRecord{step1, step2} {
			_, err := s.CommitStep(ctx, store.StepCommit{SessionID: st.SessionID, RunID: run.RunID, Step: i + 1,
				Messages: []helix.Message{helix.AssistantMessage("a")}, Usage: u})
			require.NoError(t, err)
		}
		want := append(append([]store.UsageRecord{}, step1...), step2...)
		for i := range want {
			want[i].SessionID = st.SessionID
			if want[i].RunID == "" {
				want[i].RunID = run.RunID
			}
			if want[i].Step == 0 {
				want[i].Step = 1
				if i == len(want)-1 {
					want[i].Step = 2
				}
			}
		}
		check := func(what string) {
			t.Helper()
			got, err := s.ListUsage(ctx, st.SessionID)
			require.NoError(t, err)
			require.Len(t, got, len(want), what)
			for i := range got {
				require.False(t, got[i].CreatedAt.IsZero())
				got[i].CreatedAt = time.Time{}
			}
			require.Equal(t, want, got, what)
		}
		check("after the commits")
		require.NoError(t, s.TruncateMessages(ctx, st.SessionID, 2))
		cps, err := s.ListCheckpoints(ctx, st.SessionID, nil)
		require.NoError(t, err)
		require.Len(t, cps.Items, 1, "the second step's checkpoint is gone")
		check("after a truncation removed a checkpoint")
	},
	"CommitOnInactiveSessionWritesNothing": func(t *testing.T, s Store) {
		ctx := t.Context()
		st, run := stepSession(t, s, "inactive")
		require.NoError(t, s.UpdateStatus(ctx, st.SessionID, helix.SessionFailed, &store.StatusUpdate{Error: "aborted"}))
		_, err := s.CommitStep(ctx, store.StepCommit{
			SessionID: st.SessionID, RunID: run.RunID, Step: 1,
			Messages: []helix.Message{helix.AssistantMessage("late")}, Chunks: []helix.Chunk{delta(st.SessionID, 1, "x")},
		})
		require.ErrorContains(t, err, "is failed")
		got, err := s.LoadState(ctx, st.SessionID)
		require.NoError(t, err)
		require.Zero(t, got.MessageCount)
		require.Zero(t, got.StepCount)
		require.Empty(t, labels(ctx, t, s, st.StreamID))

		// A missing run fails the whole commit too: nothing half-written.
		st2 := newSession(t, s, "norun")
		_, err = s.CommitStep(ctx, store.StepCommit{SessionID: st2.SessionID, RunID: "missing-run", Step: 1,
			Messages: []helix.Message{helix.AssistantMessage("x")}, Chunks: []helix.Chunk{delta(st2.SessionID, 1, "x")}})
		require.ErrorIs(t, err, helix.ErrNotFound)
		got, err = s.LoadState(ctx, st2.SessionID)
		require.NoError(t, err)
		require.Zero(t, got.MessageCount)
		require.Empty(t, got.CheckpointID)
		require.Empty(t, labels(ctx, t, s, st2.StreamID))
	},
	"CommitConsumesTheInterruptFlag": func(t *testing.T, s Store) {
		ctx := t.Context()
		st, run := stepSession(t, s, "interrupt")
		require.NoError(t, s.SetInterruptFlag(ctx, st.SessionID, "user asked"))
		res, err := s.CommitStep(ctx, store.StepCommit{SessionID: st.SessionID, RunID: run.RunID, Step: 2,
			Messages: []helix.Message{helix.AssistantMessage("a")}, Closing: closing(st.SessionID, 2)})
		require.NoError(t, err)
		require.True(t, res.Interrupted)
		require.Equal(t, "user asked", res.InterruptReason)
		got, err := s.LoadState(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, helix.SessionInterrupted, got.Status)
		require.NotNil(t, got.InterruptContext)
		require.Equal(t, "user asked", got.InterruptContext.Reason)
		require.Equal(t, 2, got.InterruptContext.StepCount)
		req, err := s.CheckInterruptFlag(ctx, st.SessionID)
		require.NoError(t, err)
		require.False(t, req.Requested, "the flag is consumed")
		r, err := s.GetRun(ctx, run.RunID)
		require.NoError(t, err)
		require.Equal(t, helix.RunInterrupted, r.Status)
		require.Equal(t, "user asked", r.Error)
		require.NotNil(t, r.CompletedAt)
		require.Equal(t, []string{"cp:" + res.CheckpointID, "interrupted:user asked"}, labels(ctx, t, s, st.StreamID))
	},
	"CompleteEndsSessionRunAndStream": func(t *testing.T, s Store) {
		ctx := t.Context()
		st, run := stepSession(t, s, "complete")
		require.NoError(t, s.SetInterruptFlag(ctx, st.SessionID, "too late"))
		res, err := s.CommitStep(ctx, store.StepCommit{SessionID: st.SessionID, RunID: run.RunID, Step: 1,
			Messages: []helix.Message{helix.AssistantMessage("done")}, Chunks: []helix.Chunk{delta(st.SessionID, 1, "done")},
			Complete: true, Output: raw(`{"answer":42}`), EndStream: true, Closing: closing(st.SessionID, 1)})
		require.NoError(t, err)
		require.False(t, res.Interrupted, "completion wins over a racing interrupt")
		got, err := s.LoadState(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, helix.SessionCompleted, got.Status)
		jsonEq(t, `{"answer":42}`, got.Output)
		req, err := s.CheckInterruptFlag(ctx, st.SessionID)
		require.NoError(t, err)
		require.False(t, req.Requested, "a completed step clears the flag")
		r, err := s.GetRun(ctx, run.RunID)
		require.NoError(t, err)
		require.Equal(t, helix.RunCompleted, r.Status)
		info, err := s.GetStreamInfo(ctx, st.StreamID)
		require.NoError(t, err)
		require.Equal(t, helix.StreamEnded, info.Status)
		jsonEq(t, `{"answer":42}`, info.FinalOutput)

		// A reader sees the step, the closing chunks, then the end.
		rd, err := s.NewReader(ctx, st.StreamID, nil)
		require.NoError(t, err)
		defer func() { require.NoError(t, rd.Close()) }()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		got2, _, err := collect(rctx, rd) // reads to io.EOF
		require.NoError(t, err)
		require.Equal(t, []string{"done", "cp:" + res.CheckpointID, "END"}, got2)
	},
	"ReadStepFindsOnlyTheRunsLostAttempt": func(t *testing.T, s Store) {
		ctx := t.Context()
		st, run := stepSession(t, s, "stale")
		res, err := s.CommitStep(ctx, store.StepCommit{SessionID: st.SessionID, RunID: run.RunID, Step: 1,
			Messages: []helix.Message{helix.AssistantMessage("one")}, Chunks: []helix.Chunk{delta(st.SessionID, 1, "s1")}})
		require.NoError(t, err)
		params := store.ReadStepParams{SessionID: st.SessionID, RunID: run.RunID, AfterStep: 1}
		v, err := s.ReadStep(ctx, params)
		require.NoError(t, err)
		require.False(t, v.Stale)
		require.Equal(t, 1, v.StepCount)
		require.Equal(t, 1, v.MessageCount)
		require.Equal(t, res.CheckpointID, v.CheckpointID)
		require.Equal(t, res.CheckpointSequence, v.CheckpointSequence)

		// Another run's chunks (a sub-agent on the same stream) are not
		// this run's lost attempt, whatever their step.
		_, err = s.Append(ctx, st.StreamID, []store.ChunkWrite{{RunID: "child-run", Chunk: delta("child", 5, "child")}})
		require.NoError(t, err)
		v, err = s.ReadStep(ctx, params)
		require.NoError(t, err)
		require.False(t, v.Stale)

		// This run's step 2 chunks after the checkpoint are.
		_, err = s.Append(ctx, st.StreamID, []store.ChunkWrite{
			{RunID: run.RunID, Chunk: delta(st.SessionID, 2, "lost-a")}, {RunID: run.RunID, Chunk: delta(st.SessionID, 2, "lost-b")}})
		require.NoError(t, err)
		v, err = s.ReadStep(ctx, params)
		require.NoError(t, err)
		require.True(t, v.Stale)
		require.Equal(t, res.CheckpointSequence, v.StaleFrom)

		cl, err := s.CleanupAttempt(ctx, nil, st.StreamID, run.RunID, 1, v.StaleFrom)
		require.NoError(t, err)
		require.Equal(t, 2, cl.Removed)
		require.Equal(t, []string{"s1", "child"}, labels(ctx, t, s, st.StreamID))
		again, err := s.CleanupAttempt(ctx, nil, st.StreamID, run.RunID, 1, v.StaleFrom)
		require.NoError(t, err)
		require.Zero(t, again.Removed, "idempotent")
		v, err = s.ReadStep(ctx, params)
		require.NoError(t, err)
		require.False(t, v.Stale)

		_, err = s.ReadStep(ctx, store.ReadStepParams{SessionID: "missing"})
		require.ErrorIs(t, err, helix.ErrNotFound)
	},
}
