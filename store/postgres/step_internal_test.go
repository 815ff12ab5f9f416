package postgres

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store"
)

// TestHeldCommitWritesOrIsRefused commits steps as one held statement (the
// step journal's way): it writes the whole step when what it assumes holds,
// and writes nothing, failing with CommitRefused, when an interrupt was
// requested or the message count is not the one expected; LockedCommit then
// commits the step the long way, interrupt included.
func TestHeldCommitWritesOrIsRefused(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := New(pgtest.NewPool(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	const sid = "held"
	_, err = st.CreateSession(ctx, store.CreateSessionParams{SessionID: sid, AgentType: "x"})
	require.NoError(t, err)
	run, err := st.CreateRun(ctx, store.CreateRunParams{RunID: sid + "-run", SessionID: sid})
	require.NoError(t, err)
	_, err = st.AppendMessages(ctx, sid, []helix.Message{helix.UserMessage("hi")})
	require.NoError(t, err)

	commit := func(ctx context.Context, step, expect int) (*store.StepCommitResult, error) {
		tx, err := st.Pool().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		pq := NewPipelined(tx)
		base := helix.Base{AgentID: sid, AgentType: "x", Timestamp: 1, Step: step}
		res, err := st.WithQuerier(pq).CommitStep(ctx, store.StepCommit{SessionID: sid, RunID: run.RunID, Step: step,
			Messages: []helix.Message{helix.AssistantMessage("calling"), helix.ToolResultMessage("c", "t", "ok")},
			Usage:    []store.UsageRecord{{SourceType: store.UsageModel, SourceName: "m", Success: true, Key: "model:" + string(rune('0'+step))}},
			Chunks:   []helix.Chunk{&helix.TextDeltaChunk{Base: base, Delta: "a"}},
			Closing: func(c store.StepClosing) []helix.Chunk {
				return []helix.Chunk{&helix.TextDeltaChunk{Base: base, Delta: c.CheckpointID}}
			},
			ExpectMessageCount: expect, StreamID: sid,
		})
		if err != nil {
			return nil, err
		}
		if err := pq.Flush(ctx); err != nil {
			return nil, err
		}
		return res, tx.Commit(ctx)
	}
	state := func() (int, int, int64) {
		s, err := st.LoadState(ctx, sid)
		require.NoError(t, err)
		latest, err := st.LatestSequence(ctx, sid)
		require.NoError(t, err)
		return s.StepCount, s.MessageCount, latest
	}

	res, err := commit(ctx, 1, 1)
	require.NoError(t, err)
	require.Equal(t, 3, res.MessageCount)
	steps, msgs, latest := state()
	require.Equal(t, []any{1, 3, int64(2)}, []any{steps, msgs, latest}, "the whole step, in one statement")
	cp, err := st.GetCheckpoint(ctx, res.CheckpointID)
	require.NoError(t, err)
	require.Equal(t, int64(1), *cp.StreamSequence, "the checkpoint points at the last chunk before it")

	_, err = commit(ctx, 2, 2)
	require.True(t, CommitRefused(err), "a message count it did not expect: %v", err)
	require.NoError(t, st.SetInterruptFlag(ctx, sid, "stop"))
	_, err = commit(ctx, 2, 3)
	require.True(t, CommitRefused(err), "an interrupt requested meanwhile: %v", err)
	steps, msgs, latest = state()
	require.Equal(t, []any{1, 3, int64(2)}, []any{steps, msgs, latest}, "a refused commit writes nothing")

	res, err = commit(LockedCommit(ctx), 2, 3)
	require.NoError(t, err)
	require.True(t, res.Interrupted, "under the locks, the commit sees the interrupt and consumes it")
	s, err := st.LoadState(ctx, sid)
	require.NoError(t, err)
	require.Equal(t, helix.SessionInterrupted, s.Status)
	require.Equal(t, 5, s.MessageCount)
}
