package postgres

import (
	"context"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store"
)

// TestBatchTokenMakesRetriesIdempotent replays a batch whose first attempt
// committed although the writer never heard back (a lost acknowledgement):
// the token's primary key rejects the replay whole, and the recorded outcome
// tells the writer what was written. No chunk is stored twice.
func TestBatchTokenMakesRetriesIdempotent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := New(pgtest.NewPool(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	for _, id := range []string{"a", "b"} {
		_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: id, AgentType: "x"})
		require.NoError(t, err)
	}
	require.NoError(t, st.EndStream(ctx, "b", nil)) // b is not active: nothing is written to it

	var chunks []encodedChunk
	for _, id := range []string{"a", "a", "b"} {
		c, err := encodeChunk(id, &helix.TextDeltaChunk{Base: helix.Base{AgentID: id, AgentType: "x"}, Delta: "d"}, "", 0)
		require.NoError(t, err)
		chunks = append(chunks, c)
	}
	token := uuid.New()
	first, err := st.insertChunks(ctx, st.q, chunks, token)
	require.NoError(t, err)
	require.True(t, first["a"].written)
	require.False(t, first["b"].written)

	_, err = st.insertChunks(ctx, st.q, chunks, token)
	require.True(t, isBatchTokenConflict(err), "the replay is rejected: %v", err)
	b := &batcher{st: st}
	outcome, err := b.recordedOutcome(ctx, token, chunks)
	require.NoError(t, err)
	require.NoError(t, writeError("a", outcome["a"], true))
	require.Error(t, writeError("b", outcome["b"], true))

	info, err := st.GetStreamInfo(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, int64(2), info.ChunkCount, "written once")
}

func TestRetryableErrors(t *testing.T) {
	t.Parallel()
	require.False(t, retryableError(&helix.NotFoundError{Kind: "stream", ID: "x"}))
	require.False(t, retryableError(nil))
	require.False(t, retryableError(context.Canceled))
	require.True(t, retryableError(&pgconn.PgError{Code: "57P01"}), "admin shutdown")
	require.True(t, retryableError(&pgconn.PgError{Code: "08006"}), "connection failure")
	require.False(t, retryableError(&pgconn.PgError{Code: "23505"}), "a constraint violation is final")
	require.True(t, retryableError(io.ErrUnexpectedEOF), "a network-level failure")
}
