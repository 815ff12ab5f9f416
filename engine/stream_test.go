package engine_test

import (
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/store"
)

// Stream reads a session's stream after a sequence, to its end (io.EOF
// after stream_end), as StreamChunks and StreamInfo see it; an unknown
// session is not found and a negative position is refused.
func TestStreamReadsAfterASequenceToTheEnd(t *testing.T) {
	t.Parallel()
	agent := &helix.Agent{Name: "writer", Model: script(text("one two three"))}
	e := newEngine(t, agent)
	ctx := t.Context()
	h, err := e.Execute(ctx, agent, engine.Input{Message: "go"}, &engine.ExecuteOptions{SessionID: "s"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.NoError(t, err)

	readAll := func(from int64) []store.StoredChunk {
		t.Helper()
		r, err := e.Stream(ctx, "s", from)
		require.NoError(t, err)
		defer func() { require.NoError(t, r.Close()) }()
		require.Equal(t, "s", r.StreamID())
		var out []store.StoredChunk
		for {
			c, err := r.Next(ctx)
			if errors.Is(err, io.EOF) {
				return out
			}
			require.NoError(t, err)
			out = append(out, c)
			require.Equal(t, c.Sequence, r.Sequence())
		}
	}
	all := readAll(0)
	require.Greater(t, len(all), 3)
	require.Equal(t, helix.ChunkStreamEnd, all[len(all)-1].Chunk.ChunkType())
	require.Equal(t, all[3:], readAll(all[2].Sequence), "after a sequence: the chunks after it")

	stored, err := e.StreamChunks(ctx, "s", 0, 1000)
	require.NoError(t, err)
	require.Equal(t, len(all), len(stored))
	info, err := e.StreamInfo(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, helix.StreamEnded, info.Status)
	require.Equal(t, all[len(all)-1].Sequence, info.LatestSequence)

	_, err = e.Stream(ctx, "no-such-session", 0)
	require.ErrorIs(t, err, helix.ErrNotFound)
	_, err = e.Stream(ctx, "s", -1)
	require.ErrorContains(t, err, "from must be >= 0")
}

// A reader waiting for the next chunk of a session that waits for a person
// returns when it is closed, and a closed reader says so.
func TestStreamCloseEndsAWaitingNext(t *testing.T) {
	t.Parallel()
	agent := &helix.Agent{Name: "asker", Tools: []*helix.Tool{askUser()},
		Model: script(calls(call("q1", "ask_user", `{"question":"colour?"}`)), text("thanks"))}
	e := newEngine(t, agent)
	ctx := t.Context()
	h, err := e.Execute(ctx, agent, engine.Input{Message: "go"}, &engine.ExecuteOptions{SessionID: "w"})
	require.NoError(t, err)
	res, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, res.Status)

	info, err := e.StreamInfo(ctx, "w")
	require.NoError(t, err)
	r, err := e.Stream(ctx, "w", info.LatestSequence) // nothing left to read: Next waits
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := r.Next(ctx)
		done <- err
	}()
	require.NoError(t, r.Close())
	require.Error(t, <-done)
	_, err = r.Next(ctx)
	require.ErrorContains(t, err, "the reader is closed")
	require.NoError(t, r.Close(), "Close is idempotent")
}
