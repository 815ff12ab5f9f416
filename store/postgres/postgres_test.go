package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
	"github.com/helix-agents/helix-dbos/store/storetest"
)

// TestContract runs the store contract.
func TestContract(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Store {
		return newTestStore(t, postgres.WithPollInterval(2*time.Second))
	})
}

// TestCommitInCallerTransaction proves the per-step commit joins the
// caller's transaction (as it does inside a DBOS step): a rollback after it
// leaves no trace, and a commit makes all of it visible at once.
func TestCommitInCallerTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	sess, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: "tx", AgentType: "a"})
	cpID := helix.GenerateCheckpointID("tx", 1)
	require.NoError(t, err)
	require.NoError(t, st.StageChanges(ctx, "tx", "step-1", "tc", []helix.PatchOp{{Op: "add", Path: "/x", Value: []byte(`1`)}}))

	commit := func(tx pgx.Tx) error {
		view := st.WithQuerier(postgres.PgxQuerier(tx))
		next := *sess
		next.StepCount = 1
		_, err := view.SaveStateAndPromoteStaging(ctx, store.CommitParams{
			State: &next, ExpectedVersion: sess.Version, AppendMessages: []helix.Message{helix.UserMessage("hi")},
			PromoteStepID: "step-1", Checkpoint: &store.CheckpointParams{ID: cpID, StepCount: 1, MessageCount: -1},
		})
		if err != nil {
			return err
		}
		_, err = view.Append(ctx, "tx", []store.ChunkWrite{{Chunk: &helix.StepCommittedChunk{
			Base: helix.Base{AgentID: "tx", AgentType: "a", Step: 1}, RunID: "r", StepID: "step-1", CheckpointID: cpID}}})
		return err
	}

	errAbort := errors.New("crash after the commit statements")
	err = pgx.BeginFunc(ctx, st.Pool(), func(tx pgx.Tx) error {
		if err := commit(tx); err != nil {
			return err
		}
		return errAbort
	})
	require.ErrorIs(t, err, errAbort)
	got, err := st.LoadState(ctx, "tx")
	require.NoError(t, err)
	require.Equal(t, sess.Version, got.Version, "rolled back: no trace")
	require.Zero(t, got.MessageCount)
	require.JSONEq(t, `{}`, string(got.CustomState))
	_, err = st.GetCheckpoint(ctx, cpID)
	require.ErrorIs(t, err, helix.ErrNotFound)
	has, err := st.HasStagedChanges(ctx, "tx", "step-1")
	require.NoError(t, err)
	require.True(t, has)
	info, err := st.GetStreamInfo(ctx, "tx")
	require.NoError(t, err)
	require.Zero(t, info.LatestSequence, "the chunk and its sequence number rolled back too")

	require.NoError(t, pgx.BeginFunc(ctx, st.Pool(), commit))
	got, err = st.LoadState(ctx, "tx")
	require.NoError(t, err)
	require.Equal(t, 1, got.MessageCount)
	require.Equal(t, cpID, got.CheckpointID)
	require.JSONEq(t, `{"x":1}`, string(got.CustomState))
	chunks, err := st.ReadChunks(ctx, "tx", 0, 10)
	require.NoError(t, err)
	require.Len(t, chunks, 1)
	require.Equal(t, helix.ChunkStepCommitted, chunks[0].Chunk.ChunkType())
}

func TestOptionsValidated(t *testing.T) {
	t.Parallel()
	_, err := postgres.New(nil)
	require.ErrorContains(t, err, "pool is nil")
	pool := newTestStore(t).Pool()
	for _, opt := range []postgres.Option{
		postgres.WithMaxBatch(-1), postgres.WithFlushInterval(-time.Second),
		postgres.WithPollInterval(-1), postgres.WithNotifyChannel("bad channel;"),
	} {
		_, err := postgres.New(pool, opt)
		require.Error(t, err)
	}
}

// TestClosedStoreRefusesStreams checks Close stops background work and later
// stream calls fail clearly instead of hanging.
func TestClosedStoreRefusesStreams(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: "c", AgentType: "a"})
	require.NoError(t, err)
	w := st.NewWriter("c", nil)
	require.NoError(t, w.Write(ctx, &helix.TextDeltaChunk{Base: helix.Base{AgentID: "c", AgentType: "a"}, Delta: "x"}))
	require.NoError(t, st.Close(), "Close flushes pending deltas")
	require.NoError(t, st.Close(), "idempotent")
	chunks, err := st.ReadChunks(ctx, "c", 0, 10)
	require.NoError(t, err)
	require.Len(t, chunks, 1, "the queued delta was written before Close returned")
	require.ErrorContains(t, w.Write(ctx, &helix.TextDeltaChunk{Base: helix.Base{AgentID: "c", AgentType: "a"}, Delta: "y"}), "closed")
	_, err = st.NewReader(ctx, "c", nil)
	require.ErrorContains(t, err, "closed")
}

// TestStreamLifecycleRidesOutAKilledConnection: a pooled connection the
// server terminated while it sat idle (a restart, a failover, an operator's
// pg_terminate_backend) fails the next statement sent on it. Ending,
// failing, cleaning and resetting a stream retry such errors as stream
// writes do, so none of them reaches the caller.
func TestStreamLifecycleRidesOutAKilledConnection(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	require.NoError(t, err)
	cfg.MaxConns, cfg.MinConns = 1, 1 // every statement uses the connection killed below
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	st, err := postgres.New(pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	killer, err := pgx.Connect(ctx, cfg.ConnConfig.ConnString())
	require.NoError(t, err)
	t.Cleanup(func() { _ = killer.Close(context.Background()) })
	kill := func() {
		t.Helper()
		var pid uint32
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		pid = c.Conn().PgConn().PID()
		c.Release()
		var ok bool
		require.NoError(t, killer.QueryRow(ctx, `SELECT pg_terminate_backend($1::int, 5000)`, pid).Scan(&ok))
		require.True(t, ok)
	}

	for i, op := range []func(id string) error{
		func(id string) error { return st.EndStream(ctx, id, json.RawMessage(`"done"`)) },
		func(id string) error { return st.FailStream(ctx, id, "boom") },
		func(id string) error { _, err := st.CleanupToStep(ctx, id, 0, 0); return err },
		func(id string) error { return st.ResetStream(ctx, id) },
	} {
		id := fmt.Sprintf("killed-%d", i)
		_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: id, AgentType: "a"})
		require.NoError(t, err)
		_, err = st.Append(ctx, id, []store.ChunkWrite{{Chunk: &helix.TextDeltaChunk{Base: helix.Base{AgentID: id, AgentType: "a", Step: 1}, Delta: "x"}}})
		require.NoError(t, err)
		kill()
		require.NoError(t, op(id), "operation %d after its connection was killed", i)
	}
	info, err := st.GetStreamInfo(ctx, "killed-0")
	require.NoError(t, err)
	require.Equal(t, helix.StreamEnded, info.Status)
	info, err = st.GetStreamInfo(ctx, "killed-1")
	require.NoError(t, err)
	require.Equal(t, helix.StreamFailed, info.Status)
}

// A writer's guard is asked before each batch holding its chunks: once it
// refuses, the writer's queued chunks are dropped (not those of other
// writers in the same batch) and the writer fails with the guard's error.
func TestWriterGuardDropsRefusedChunks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	for _, id := range []string{"fenced", "free"} {
		_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: id, AgentType: "a"})
		require.NoError(t, err)
	}
	var refuse atomic.Bool
	fenced := errors.New("fenced: the session was taken over")
	w := st.NewWriter("fenced", &store.WriterOptions{Guard: func(context.Context) error {
		if refuse.Load() {
			return fenced
		}
		return nil
	}})
	other := st.NewWriter("free", nil)
	delta := func(id, d string) helix.Chunk {
		return &helix.TextDeltaChunk{Base: helix.Base{AgentID: id, AgentType: "a"}, Delta: d}
	}
	require.NoError(t, w.Write(ctx, delta("fenced", "before")))
	require.NoError(t, w.Flush(ctx))
	refuse.Store(true)
	require.NoError(t, w.Write(ctx, delta("fenced", "after")), "a delta is queued; its batch fails later")
	require.NoError(t, other.Write(ctx, delta("free", "shared batch")))
	require.ErrorIs(t, w.Flush(ctx), fenced)
	require.NoError(t, other.Flush(ctx))
	require.ErrorIs(t, w.Write(ctx, delta("fenced", "later")), fenced, "the failure is sticky")

	for id, want := range map[string][]string{"fenced": {"before"}, "free": {"shared batch"}} {
		chunks, err := st.ReadChunks(ctx, id, 0, 10)
		require.NoError(t, err)
		var got []string
		for _, c := range chunks {
			got = append(got, c.Chunk.(*helix.TextDeltaChunk).Delta)
		}
		require.Equal(t, want, got, "stream %s", id)
	}
}

// A chunk queued while an earlier batch of its writer is in flight is not
// written once that batch failed: the stream would hold it after a gap (the
// chaos suite saw a model step's later deltas without the first, then the
// step's retry wrote them all again). The first batch's guard holds it
// until the second chunk is queued, then refuses; the second batch's guard
// would accept.
func TestWriterWritesNothingAfterAFailedBatch(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: "gapless", AgentType: "a"})
	require.NoError(t, err)
	asked, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	lost := errors.New("the first batch could not be written")
	w := st.NewWriter("gapless", &store.WriterOptions{Guard: func(context.Context) error {
		if calls.Add(1) > 1 {
			return nil
		}
		close(asked)
		<-release
		return lost
	}})
	delta := func(d string) helix.Chunk {
		return &helix.TextDeltaChunk{Base: helix.Base{AgentID: "gapless", AgentType: "a"}, Delta: d}
	}
	require.NoError(t, w.Queue(ctx, delta("first")))
	flushed := make(chan error, 1)
	go func() { flushed <- w.Flush(ctx) }()
	<-asked // the first batch is being written
	require.NoError(t, w.Queue(ctx, delta("second")), "queued in the next batch")
	close(release)
	require.ErrorIs(t, <-flushed, lost)
	require.ErrorIs(t, w.Flush(ctx), lost)

	chunks, err := st.ReadChunks(ctx, "gapless", 0, 10)
	require.NoError(t, err)
	require.Empty(t, chunks, "nothing of the writer after its failed batch")
}

// TestDeleteSessionLeavesNoRows proves that deleting a session tree takes
// every row the steps of its sessions appended (messages, checkpoints with
// their usage, stream chunks), although those tables have no foreign keys
// (statement triggers delete them), and leaves another
// session's rows alone.
func TestDeleteSessionLeavesNoRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	pool := st.Pool()
	step := func(id string) {
		_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: id, AgentType: "a",
			ParentSessionID: map[bool]string{true: "gone"}[id == "gone-sub"]})
		require.NoError(t, err)
		_, err = st.CreateRun(ctx, store.CreateRunParams{RunID: id + "-run", SessionID: id})
		require.NoError(t, err)
		s, err := st.LoadState(ctx, id)
		require.NoError(t, err)
		_, err = st.CommitStep(ctx, store.StepCommit{SessionID: id, RunID: id + "-run", Step: 1,
			Messages: []helix.Message{helix.UserMessage("q"), helix.AssistantMessage("a")},
			Usage:    []store.UsageRecord{{SourceType: store.UsageModel, Success: true, Key: "model:1"}},
			Chunks: []helix.Chunk{&helix.StepStartChunk{Base: helix.Base{AgentID: id, AgentType: "a", Step: 1}},
				&helix.TextDeltaChunk{Base: helix.Base{AgentID: id, AgentType: "a", Step: 1}, Delta: "a"}},
			StreamID: s.StreamID})
		require.NoError(t, err)
	}
	for _, id := range []string{"gone", "gone-sub", "kept"} {
		step(id)
	}
	streams := map[string]string{}
	for _, id := range []string{"gone", "gone-sub", "kept"} {
		s, err := st.LoadState(ctx, id)
		require.NoError(t, err)
		streams[id] = s.StreamID
	}
	require.Equal(t, streams["gone"], streams["gone-sub"], "a sub-agent writes into its root's stream")
	rows := func(id string) map[string]int {
		out := map[string]int{}
		byStream := streams[id]
		for table, q := range map[string]struct{ sql, arg string }{
			"messages":    {`SELECT count(*) FROM helix.messages m JOIN helix.sessions s ON s.key = m.session_key WHERE s.session_id = $1`, id},
			"checkpoints": {`SELECT count(*) FROM helix.checkpoints c JOIN helix.sessions s ON s.key = c.session_key WHERE s.session_id = $1`, id},
			"usage":       {`SELECT count(*) FROM helix.usage_records WHERE session_id = $1`, id},
			"chunks":      {`SELECT count(*) FROM helix.stream_chunks c JOIN helix.streams t ON t.key = c.stream_key WHERE t.stream_id = $1`, byStream},
			"streams":     {`SELECT count(*) FROM helix.streams WHERE stream_id = $1`, byStream},
		} {
			var n int
			require.NoError(t, pool.QueryRow(ctx, q.sql, q.arg).Scan(&n))
			out[table] = n
		}
		return out
	}
	none := map[string]int{"messages": 0, "checkpoints": 0, "usage": 0, "chunks": 0, "streams": 0}
	written := map[string]map[string]int{}
	for _, id := range []string{"gone", "gone-sub", "kept"} {
		written[id] = rows(id)
		for table, n := range written[id] {
			require.Positive(t, n, "%s of %s", table, id)
		}
	}
	require.NoError(t, st.DeleteSession(ctx, "gone"))
	require.Equal(t, none, rows("gone"))
	require.Equal(t, none, rows("gone-sub"), "the sub-session goes with its parent")
	require.Equal(t, written["kept"], rows("kept"))
}
