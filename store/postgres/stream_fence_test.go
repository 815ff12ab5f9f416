package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// TestFencedStreamWrites proves the fence of stream writes in the writing
// statement itself: a write of an execution whose workflow was taken over
// (its DBOS owner token changed) lands nowhere, also when the takeover
// commits while the write waits for it, and the writer fails with
// store.ErrFenced; writes without a fence, and of other streams in the
// same batch, are unaffected.
func TestFencedStreamWrites(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// A long flush interval: the writers' deltas below go out in one batch.
	st := newClusterStore(t, postgres.WithFlushInterval(time.Minute))
	pool := st.Pool()
	for _, id := range []string{"zombie", "owner", "plain"} {
		_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: id, AgentType: "x"})
		require.NoError(t, err)
	}
	_, err := pool.Exec(ctx, `INSERT INTO dbos.workflow_status (workflow_uuid, status, executor_id, owner_xid, created_at) VALUES
		('wf-zombie', 'PENDING', 'exec-a', 'token-a', 0), ('wf-owner', 'PENDING', 'exec-a', 'token-b', 0)`)
	require.NoError(t, err)
	delta := func(session, text string) helix.Chunk {
		return &helix.TextDeltaChunk{Base: helix.Base{AgentID: session, AgentType: "x", Step: 1}, Delta: text}
	}
	texts := func(stream string) []string {
		chunks, err := st.ReadChunks(ctx, stream, 0, 100)
		require.NoError(t, err)
		var out []string
		for _, c := range chunks {
			out = append(out, c.Chunk.(*helix.TextDeltaChunk).Delta)
		}
		return out
	}
	zombie := &store.Fence{WorkflowID: "wf-zombie", Owner: "token-a"}

	// Owned: a fenced Append and a fenced writer land.
	_, err = st.Append(ctx, "zombie", []store.ChunkWrite{{Chunk: delta("zombie", "a1"), Fence: zombie}})
	require.NoError(t, err)
	w := st.NewWriter("zombie", &store.WriterOptions{Fence: zombie})
	require.NoError(t, w.Write(ctx, delta("zombie", "a2")))
	require.NoError(t, w.Flush(ctx))

	// The takeover commits while the next write waits for the workflow's
	// row: the write reads the new owner token and writes nothing.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	_, err = tx.Exec(ctx, `UPDATE dbos.workflow_status SET status = 'ENQUEUED', owner_xid = NULL, executor_id = 'exec-b'
		WHERE workflow_uuid = 'wf-zombie'`)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := st.Append(ctx, "zombie", []store.ChunkWrite{{Chunk: delta("zombie", "late"), Fence: zombie}})
		done <- err
	}()
	waitBlocked(t, pool)
	require.NoError(t, tx.Commit(ctx))
	require.ErrorIs(t, <-done, store.ErrFenced)

	// After the takeover: a writer's batch is refused too, and the writer
	// fails for good; a batch of several streams writes the others' chunks.
	require.NoError(t, w.Write(ctx, delta("zombie", "late2")))
	require.ErrorIs(t, w.Flush(ctx), store.ErrFenced)
	require.ErrorIs(t, w.Write(ctx, &helix.ToolStartChunk{Base: helix.Base{AgentID: "zombie", AgentType: "x", Step: 1}, ToolCallID: "c", ToolName: "t"}), store.ErrFenced)
	mixed := st.NewWriter("zombie", &store.WriterOptions{Fence: zombie})
	owner := st.NewWriter("owner", &store.WriterOptions{Fence: &store.Fence{WorkflowID: "wf-owner", Owner: "token-b"}})
	plain := st.NewWriter("plain", nil)
	require.NoError(t, mixed.Write(ctx, delta("zombie", "late3")))
	require.NoError(t, owner.Write(ctx, delta("owner", "b1")))
	require.NoError(t, plain.Write(ctx, delta("plain", "p1")))
	require.ErrorIs(t, mixed.Flush(ctx), store.ErrFenced)
	require.NoError(t, owner.Flush(ctx))
	require.NoError(t, plain.Flush(ctx))

	require.Equal(t, []string{"a1", "a2"}, texts("zombie"))
	require.Equal(t, []string{"b1"}, texts("owner"))
	require.Equal(t, []string{"p1"}, texts("plain"))
	info, err := st.GetStreamInfo(ctx, "zombie")
	require.NoError(t, err)
	require.EqualValues(t, 2, info.LatestSequence, "a refused write allocates no sequence")

	// A fenced execution's clean-up of a lost attempt (a resync) removes
	// nothing (what it would remove may be the new owner's); an owner's
	// removes.
	_, err = st.Append(ctx, "plain", []store.ChunkWrite{{RunID: "r", Chunk: delta("plain", "p2")}})
	require.NoError(t, err)
	_, err = st.CleanupAttempt(ctx, zombie, "plain", "r", 0, 0)
	require.ErrorIs(t, err, store.ErrFenced)
	require.Equal(t, []string{"p1", "p2"}, texts("plain"))
	res, err := st.CleanupAttempt(ctx, &store.Fence{WorkflowID: "wf-owner", Owner: "token-b"}, "plain", "r", 0, 0)
	require.NoError(t, err)
	require.Equal(t, 1, res.Removed)
	require.Equal(t, []string{"p1"}, texts("plain"))
}

// waitBlocked waits until an append waits for a lock (the status row of
// its fence's workflow).
func waitBlocked(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE cardinality(pg_blocking_pids(pid)) > 0 AND query LIKE '%fences AS MATERIALIZED%'`).Scan(&n))
		return n > 0
	}, 30*time.Second, 10*time.Millisecond, "the fenced append waits for the takeover's lock")
}
