package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

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
	require.NoError(t, writeError("a", outcome["a"], true, false))
	require.Error(t, writeError("b", outcome["b"], true, false))

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
	require.False(t, retryableError(&helix.StreamNotActiveError{StreamID: "x", Status: helix.StreamFailed}), "a stream's state is final")
	require.False(t, retryableError(fmt.Errorf("end: %w", &helix.StreamFailedError{StreamID: "x", Message: "m"})), "wrapped too")
}

// TestEndingAFailedStreamAnswersAtOnce ends and fails streams that are no
// longer active under a retry timeout far longer than the test's context:
// the answer (ErrStreamNotActive, or the no-op of ending twice) comes from
// the first attempt. Retried, it came when the retry timeout ran out (10 s
// by default), and here it would be the context's deadline instead.
func TestEndingAFailedStreamAnswersAtOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := New(pgtest.NewPool(t), WithRetryTimeout(time.Hour))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	for _, id := range []string{"failed", "ended"} {
		_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: id, AgentType: "x"})
		require.NoError(t, err)
	}
	require.NoError(t, st.FailStream(ctx, "failed", "boom"))
	require.ErrorIs(t, st.EndStream(ctx, "failed", nil), helix.ErrStreamNotActive)
	require.NoError(t, st.FailStream(ctx, "failed", "again"), "failing twice is a no-op")
	require.NoError(t, st.EndStream(ctx, "ended", nil))
	require.NoError(t, st.EndStream(ctx, "ended", nil), "ending twice is a no-op")
	require.NoError(t, ctx.Err())
}

// TestPackedRowsReadBackByteForByte appends chunks that pack into rows of
// several (same run, step and attempt) and alone, and reads them back: the
// same chunks, byte for byte, at consecutive sequences, from any sequence
// inside a row and under any page size; cleanup removes whole rows and
// reports the chunks it removed.
func TestPackedRowsReadBackByteForByte(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := New(pgtest.NewPool(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	_, err = st.CreateSession(ctx, store.CreateSessionParams{SessionID: "p", AgentType: "x"})
	require.NoError(t, err)

	base := func(step int, ts int64) helix.Base {
		return helix.Base{AgentID: "p", AgentType: "x", Timestamp: ts, Step: step}
	}
	chunks := []helix.Chunk{
		&helix.StepStartChunk{Base: base(1, 10), StepID: "r1:1"},
		&helix.TextDeltaChunk{Base: base(1, 10), Delta: `a "quoted" <b>`},
		&helix.TextDeltaChunk{Base: base(1, 11), Delta: "b"},
		&helix.ToolStartChunk{Base: base(1, 11), ToolCallID: "c1", ToolName: "noop", Arguments: []byte(`{"i": 1}`)},
		&helix.TextDeltaChunk{Base: base(2, 12), Delta: "alone"},
		&helix.TextDeltaChunk{Base: base(3, 13), Delta: "c"},
		&helix.TextDeltaChunk{Base: base(3, 13), Delta: "d"},
	}
	var writes []store.ChunkWrite
	for _, c := range chunks {
		writes = append(writes, store.ChunkWrite{Chunk: c, RunID: "r1"})
	}
	latest, err := st.Append(ctx, "p", writes)
	require.NoError(t, err)
	require.Equal(t, int64(len(chunks)), latest)

	var rows, coded int
	require.NoError(t, st.shared.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE chunk::text LIKE '[3,%') FROM helix.stream_chunks c JOIN helix.streams t ON t.key = c.stream_key WHERE t.stream_id = 'p'`).Scan(&rows, &coded))
	require.Equal(t, 3, rows, "steps 1 and 3 pack into one row each")
	require.Equal(t, 3, coded, "rows are coded, step 2's of one chunk too")
	info, err := st.GetStreamInfo(ctx, "p")
	require.NoError(t, err)
	require.Equal(t, int64(len(chunks)), info.ChunkCount)

	want := make([]string, len(chunks))
	for i, c := range chunks {
		raw, err := json.Marshal(c)
		require.NoError(t, err)
		want[i] = string(raw)
	}
	for after := range int64(len(chunks)) {
		for _, limit := range []int{1, 2, 3, 100} {
			page, err := st.ReadChunks(ctx, "p", after, limit)
			require.NoError(t, err)
			require.Len(t, page, min(limit, len(chunks)-int(after)), "after %d, limit %d", after, limit)
			for i, sc := range page {
				seq := after + int64(i) + 1
				require.Equal(t, seq, sc.Sequence)
				require.Equal(t, want[seq-1], string(sc.Raw), "chunk %d", seq)
				require.Equal(t, chunks[seq-1].ChunkBase().Step, sc.Step)
				require.Equal(t, "r1", sc.RunID)
			}
		}
	}

	res, err := st.CleanupToStep(ctx, "p", 1, 0)
	require.NoError(t, err)
	require.Equal(t, store.CleanupResult{Removed: 3, MinSequence: 5, MaxSequence: 7, AtSequence: 7}, res)
	page, err := st.ReadChunks(ctx, "p", 0, 100)
	require.NoError(t, err)
	require.Len(t, page, 4)
}

// TestCompactedRowsReadBackByteForByte packs a step's commit chunks, which
// repeat the row's run (runId), its run and step (stepId) and the step's
// checkpoint ID: the row stores the run not at all, the checkpoint ID by its
// random suffix, and every chunk reads back byte for byte, including one
// whose text looks like a coded row and one whose runId is another run's.
func TestCompactedRowsReadBackByteForByte(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := New(pgtest.NewPool(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	_, err = st.CreateSession(ctx, store.CreateSessionParams{SessionID: "cp", AgentType: "x"})
	require.NoError(t, err)

	const run, cp = "01a215ce-0829-70cb-9613-e1fc6768ed49", "cpv1-cp-s4-t1795662153813-28b066"
	base := helix.Base{AgentID: "cp", AgentType: "x", Timestamp: 7, Step: 4}
	chunks := []helix.Chunk{
		&helix.TextDeltaChunk{Base: base, Delta: `"~" {"~":"rs0"} [2,{"t":0,"R":0,"P":"x"}]`},
		&helix.StepEndChunk{Base: base, StepID: run + ":4", FinishReason: "stop"},
		&helix.CheckpointCreatedChunk{Base: base, RunID: run, CheckpointID: cp, StepCount: 4},
		&helix.StepCommittedChunk{Base: base, RunID: run, StepID: run + ":4", CheckpointID: cp},
		&helix.StepCommittedChunk{Base: base, RunID: "another-run", StepID: "another-run:4", CheckpointID: cp},
	}
	var writes []store.ChunkWrite
	want := make([]string, len(chunks))
	plain := 0
	for i, c := range chunks {
		writes = append(writes, store.ChunkWrite{Chunk: c, RunID: run})
		raw, err := json.Marshal(c)
		require.NoError(t, err)
		want[i], plain = string(raw), plain+len(raw)
	}
	_, err = st.Append(ctx, "cp", writes)
	require.NoError(t, err)

	var body string
	require.NoError(t, st.shared.pool.QueryRow(ctx, `SELECT chunk::text FROM helix.stream_chunks c JOIN helix.streams t ON t.key = c.stream_key WHERE t.stream_id = 'cp'`).Scan(&body))
	require.Equal(t, 0, strings.Count(body, cp), "the checkpoint ID comes from the chunk's agent, step and timestamp: %s", body)
	require.Equal(t, 1, strings.Count(body, `"28b066"`), "its random suffix, once: the commits take it from the chunk before: %s", body)
	require.Equal(t, 0, strings.Count(body, `"cp"`), "the agent's ID is the stream's: %s", body)
	require.Equal(t, 1, strings.Count(body, `"another-run"`), "another run's ID is kept: %s", body)
	require.Equal(t, 0, strings.Count(body, run), "the run's ID comes from the row: %s", body)
	require.Less(t, len(body), plain/2)

	page, err := st.ReadChunks(ctx, "cp", 0, 100)
	require.NoError(t, err)
	require.Len(t, page, len(chunks))
	for i, sc := range page {
		require.Equal(t, want[i], string(sc.Raw), "chunk %d", i+1)
	}
}

// TestSubAgentRowsReadBackByteForByte appends a step of a session and of
// its sub-agent into the session's stream: the session's chunks leave out
// their agentId (the stream's), the sub-agent's keep theirs, and every
// chunk reads back byte for byte.
func TestSubAgentRowsReadBackByteForByte(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := New(pgtest.NewPool(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	const parent, child, run = "01a216f4-2748-7306-8e5e-af8d1d2d763a", "01a216f4-2748-7306-8e5e-af8d1d2d0001", "01a216f4-2748-7306-8e5e-af8d1d2d0002"
	_, err = st.CreateSession(ctx, store.CreateSessionParams{SessionID: parent, AgentType: "x"})
	require.NoError(t, err)

	base := func(agent string, ts int64) helix.Base {
		return helix.Base{AgentID: agent, AgentType: "x", Timestamp: ts, Step: 3}
	}
	chunks := []helix.Chunk{
		&helix.SubAgentStartChunk{Base: base(parent, 5), SubAgentType: "y", SubSessionID: child, CallID: "c"},
		&helix.TextDeltaChunk{Base: base(child, 5), Delta: "a"},
		&helix.TextDeltaChunk{Base: base(child, 9), Delta: "b"},
		&helix.SubAgentEndChunk{Base: base(parent, 9), SubAgentType: "y", SubSessionID: child, CallID: "c", Result: json.RawMessage(`{}`)},
		&helix.StepCommittedChunk{Base: base(parent, 9), RunID: run, StepID: run + ":3", CheckpointID: "cpv1-" + parent + "-s3-t9-abc"},
	}
	var writes []store.ChunkWrite
	for _, c := range chunks {
		writes = append(writes, store.ChunkWrite{Chunk: c, RunID: run})
	}
	_, err = st.Append(ctx, parent, writes)
	require.NoError(t, err)

	var body string
	require.NoError(t, st.shared.pool.QueryRow(ctx, `SELECT chunk::text FROM helix.stream_chunks c JOIN helix.streams t ON t.key = c.stream_key WHERE t.stream_id = $1`, parent).Scan(&body))
	require.True(t, strings.HasPrefix(body, "[3,"), body)
	require.Equal(t, 2, strings.Count(body, `"a":"`+child+`"`), "the sub-agent's chunks keep their agentId: %s", body)
	require.Equal(t, 0, strings.Count(body, `"a":"`+parent+`"`), "the session's take the stream's: %s", body)
	page, err := st.ReadChunks(ctx, parent, 0, 100)
	require.NoError(t, err)
	require.Len(t, page, len(chunks))
	for i, sc := range page {
		raw, err := json.Marshal(chunks[i])
		require.NoError(t, err)
		require.Equal(t, string(raw), string(sc.Raw), "chunk %d", i+1)
	}
}
