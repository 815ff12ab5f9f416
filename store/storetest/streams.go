package storetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

func delta(agent string, step int, text string) *helix.TextDeltaChunk {
	return &helix.TextDeltaChunk{Base: helix.Base{AgentID: agent, AgentType: "tester", Step: step}, Delta: text}
}

func toolStart(agent string, step int, id string) *helix.ToolStartChunk {
	return &helix.ToolStartChunk{Base: helix.Base{AgentID: agent, AgentType: "tester", Step: step},
		ToolCallID: id, ToolName: "t", Arguments: raw(`{}`)}
}

// label identifies a test chunk by its payload.
func label(c helix.Chunk) string {
	switch v := c.(type) {
	case *helix.TextDeltaChunk:
		return v.Delta
	case *helix.ToolStartChunk:
		return v.ToolCallID
	case *helix.StreamEnd:
		return "END"
	}
	return string(c.ChunkType())
}

// collect reads until EOF (or error) and returns the labels and sequences.
func collect(ctx context.Context, r store.Reader) ([]string, []int64, error) {
	var labels []string
	var seqs []int64
	for {
		c, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			return labels, seqs, nil
		}
		if err != nil {
			return labels, seqs, err
		}
		labels = append(labels, label(c.Chunk))
		seqs = append(seqs, c.Sequence)
	}
}

func requireIncreasing(t *testing.T, seqs []int64) {
	t.Helper()
	for i := 1; i < len(seqs); i++ {
		require.Greater(t, seqs[i], seqs[i-1], "sequences strictly increase")
	}
}

// readerResult is what a reader goroutine saw.
type readerResult struct {
	labels []string
	seqs   []int64
	err    error
}

func startReader(ctx context.Context, t *testing.T, s Store, streamID string, from int64) <-chan readerResult {
	t.Helper()
	r, err := s.NewReader(ctx, streamID, &store.ReaderOptions{FromSequence: from})
	require.NoError(t, err)
	out := make(chan readerResult, 1)
	go func() {
		defer r.Close()
		l, s, err := collect(ctx, r)
		out <- readerResult{l, s, err}
	}()
	return out
}

var streamCases = map[string]func(t *testing.T, s Store){
	"ReadersBeforeDuringAfterSeeEveryChunkOnceInOrder": func(t *testing.T, s Store) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		st := newSession(t, s, "live")
		id := st.StreamID
		const n = 400
		var want []string
		for i := range n {
			want = append(want, fmt.Sprintf("c%03d", i))
		}

		before := startReader(ctx, t, s, id, 0)
		half, proceed := make(chan struct{}), make(chan struct{})
		written := make(chan error, 1)
		go func() {
			w := s.NewWriter(id, &store.WriterOptions{RunID: "run-1"})
			for i, l := range want {
				var err error
				if i%25 == 24 {
					err = w.Write(ctx, toolStart(id, 1, l)) // a durable, non-delta chunk
				} else {
					err = w.Write(ctx, delta(id, 1, l))
				}
				if err != nil {
					written <- err
					return
				}
				if i == n/2 {
					if err := w.Flush(ctx); err != nil {
						written <- err
						return
					}
					close(half)
					<-proceed // the "during" readers attach here, mid-stream
				}
			}
			if err := w.Close(ctx); err != nil {
				written <- err
				return
			}
			written <- s.EndStream(ctx, id, raw(`{"done":true}`))
		}()
		<-half
		during := startReader(ctx, t, s, id, 0)
		mid, err := s.GetStreamInfo(ctx, id)
		require.NoError(t, err)
		midSeq := mid.LatestSequence
		duringFromMid := startReader(ctx, t, s, id, midSeq)
		close(proceed)
		require.NoError(t, <-written)
		after := startReader(ctx, t, s, id, 0)

		full := append(append([]string{}, want...), "END")
		for name, ch := range map[string]<-chan readerResult{"before": before, "during": during, "after": after} {
			res := <-ch
			require.NoError(t, res.err, name)
			require.Equal(t, full, res.labels, "%s: every chunk exactly once, in order", name)
			requireIncreasing(t, res.seqs)
		}
		res := <-duringFromMid
		require.NoError(t, res.err)
		require.Equal(t, full[midSeq:], res.labels, "a reader resuming after sequence N gets exactly the rest")
		require.Equal(t, midSeq+1, res.seqs[0])

		info, err := s.GetStreamInfo(ctx, id)
		require.NoError(t, err)
		require.Equal(t, helix.StreamEnded, info.Status)
		require.Equal(t, int64(n+1), info.LatestSequence)
		require.Equal(t, int64(n+1), info.ChunkCount)
		require.JSONEq(t, `{"done":true}`, string(info.FinalOutput))
	},
	"ConcurrentWritersAcrossStreams": func(t *testing.T, s Store) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		const streams, writersPer, per = 6, 3, 60
		var wg sync.WaitGroup
		errs := make(chan error, streams*writersPer)
		ids := make([]string, streams)
		for i := range streams {
			ids[i] = newSession(t, s, fmt.Sprintf("multi%d", i)).StreamID
		}
		for _, id := range ids {
			for w := range writersPer {
				wg.Add(1)
				go func() {
					defer wg.Done()
					wr := s.NewWriter(id, nil)
					for j := range per {
						if err := wr.Write(ctx, delta(id, 1, fmt.Sprintf("w%d-%03d", w, j))); err != nil {
							errs <- err
							return
						}
					}
					errs <- wr.Close(ctx)
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		for _, id := range ids {
			chunks, err := s.ReadChunks(ctx, id, 0, 1000)
			require.NoError(t, err)
			require.Len(t, chunks, writersPer*per)
			next := map[string]int{}
			for i, c := range chunks {
				require.Equal(t, int64(i+1), c.Sequence, "no gaps without cleanup")
				l := label(c.Chunk)
				w := l[:2]
				require.Equal(t, fmt.Sprintf("%s-%03d", w, next[w]), l, "each writer's chunks keep their order")
				next[w]++
			}
		}
	},
	"EndFailReactivate": func(t *testing.T, s Store) {
		ctx := t.Context()
		st := newSession(t, s, "life")
		id := st.StreamID
		seq, err := s.Append(ctx, id, []store.ChunkWrite{{Chunk: delta(id, 1, "a")}, {Chunk: delta(id, 1, "b"), RunID: "r", Attempt: 2}})
		require.NoError(t, err)
		require.Equal(t, int64(2), seq)
		require.NoError(t, s.EndStream(ctx, id, nil))
		require.NoError(t, s.EndStream(ctx, id, raw(`1`)), "ending twice is a no-op")
		info, err := s.GetStreamInfo(ctx, id)
		require.NoError(t, err)
		require.Equal(t, int64(3), info.LatestSequence, "only one stream_end")

		_, err = s.Append(ctx, id, []store.ChunkWrite{{Chunk: delta(id, 1, "late")}})
		var na *helix.StreamNotActiveError
		require.ErrorAs(t, err, &na)
		require.Equal(t, helix.StreamEnded, na.Status)
		w := s.NewWriter(id, nil)
		require.NoError(t, w.Write(ctx, delta(id, 1, "late delta")), "a delta write is queued")
		require.ErrorIs(t, w.Flush(ctx), helix.ErrStreamNotActive, "its failure surfaces on Flush")
		require.ErrorIs(t, w.Write(ctx, delta(id, 1, "more")), helix.ErrStreamNotActive, "and sticks")

		// A new turn reactivates the stream; sequences continue.
		require.NoError(t, s.ReactivateStream(ctx, id))
		seq, err = s.Append(ctx, id, []store.ChunkWrite{{Chunk: delta(id, 1, "turn2")}})
		require.NoError(t, err)
		require.Equal(t, int64(4), seq)
		chunks, err := s.ReadChunks(ctx, id, 0, 10)
		require.NoError(t, err)
		require.Equal(t, "r", chunks[1].RunID)
		require.Equal(t, 2, chunks[1].Attempt)
		require.Equal(t, 1, chunks[1].Step)
		require.Equal(t, helix.ChunkStreamEnd, chunks[2].Chunk.ChunkType())

		// A reader from the start stops at the first stream_end.
		r, err := s.NewReader(ctx, id, nil)
		require.NoError(t, err)
		labels, _, err := collect(ctx, r)
		require.NoError(t, err)
		require.Equal(t, []string{"a", "b", "END"}, labels)
		require.NoError(t, r.Close())

		require.NoError(t, s.FailStream(ctx, id, "model exploded"))
		require.NoError(t, s.FailStream(ctx, id, "again"), "idempotent")
		r, err = s.NewReader(ctx, id, &store.ReaderOptions{FromSequence: 3})
		require.NoError(t, err)
		labels, _, err = collect(ctx, r)
		var failed *helix.StreamFailedError
		require.ErrorAs(t, err, &failed, "a failed stream ends readers with its error after the last chunk")
		require.Equal(t, "model exploded", failed.Message)
		require.Equal(t, []string{"turn2"}, labels)
		require.NoError(t, r.Close())
		require.ErrorIs(t, s.EndStream(ctx, id, nil), helix.ErrStreamNotActive)

		_, err = s.Append(ctx, "no-such-stream", []store.ChunkWrite{{Chunk: delta("x", 1, "a")}})
		require.ErrorIs(t, err, helix.ErrNotFound)
		_, err = s.NewReader(ctx, "no-such-stream", nil)
		require.ErrorIs(t, err, helix.ErrNotFound)
		require.ErrorIs(t, s.NewWriter("no-such-stream", nil).Write(ctx, toolStart("x", 1, "t")), helix.ErrNotFound)
		_, err = s.Append(ctx, id, []store.ChunkWrite{{Chunk: &helix.StreamEnd{StreamID: id}}})
		require.Error(t, err, "stream_end is only written by EndStream")
	},
	"CleanupRespectsMinSequenceAndTruncatesReaders": func(t *testing.T, s Store) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		st := newSession(t, s, "cleanup")
		id := st.StreamID
		// Turn 1: steps 1..3, committed.
		var turn1 []store.ChunkWrite
		for step := 1; step <= 3; step++ {
			turn1 = append(turn1, store.ChunkWrite{Chunk: delta(id, step, fmt.Sprintf("t1s%d", step))})
		}
		turn2Start, err := s.Append(ctx, id, turn1)
		require.NoError(t, err)
		// Turn 2: step 1 committed, step 2 was mid-flight when the process died.
		_, err = s.Append(ctx, id, []store.ChunkWrite{
			{Chunk: delta(id, 1, "t2s1")}, {Chunk: delta(id, 2, "t2s2a")}, {Chunk: delta(id, 2, "t2s2b")},
		})
		require.NoError(t, err)

		caughtUp, err := s.NewReader(ctx, id, nil) // will read everything before the cleanup
		require.NoError(t, err)
		for range 6 {
			_, err := caughtUp.Next(ctx)
			require.NoError(t, err)
		}
		behind, err := s.NewReader(ctx, id, &store.ReaderOptions{FromSequence: 4}) // has not read 5, 6
		require.NoError(t, err)
		_, err = behind.Next(ctx) // buffers its page (5, 6) and yields 5: its cursor is past the cleanup
		require.NoError(t, err)
		lagging, err := s.NewReader(ctx, id, &store.ReaderOptions{FromSequence: 4})
		require.NoError(t, err)

		res, err := s.CleanupToStep(ctx, id, 1, turn2Start)
		require.NoError(t, err)
		require.Equal(t, 2, res.Removed, "only the orphaned step of the current turn")
		require.Equal(t, int64(5), res.MinSequence)
		require.Equal(t, int64(6), res.MaxSequence)
		require.Equal(t, int64(6), res.AtSequence)
		again, err := s.CleanupToStep(ctx, id, 1, turn2Start)
		require.NoError(t, err)
		require.Zero(t, again.Removed, "idempotent")

		chunks, err := s.ReadChunks(ctx, id, 0, 100)
		require.NoError(t, err)
		var left []string
		for _, c := range chunks {
			left = append(left, label(c.Chunk))
		}
		require.Equal(t, []string{"t1s1", "t1s2", "t1s3", "t2s1"}, left, "earlier turns are protected by the floor")

		// A new chunk after the cleanup (the resync marker of a real run).
		_, err = s.Append(ctx, id, []store.ChunkWrite{{Chunk: delta(id, 2, "retry")}})
		require.NoError(t, err)

		// A reader that fetched the removed chunks before the cleanup is not
		// failed: it goes on with the new chunks.
		c, err := behind.Next(ctx)
		require.NoError(t, err)
		require.Equal(t, "t2s2b", label(c.Chunk))
		c, err = behind.Next(ctx)
		require.NoError(t, err)
		require.Equal(t, "retry", label(c.Chunk))
		c, err = caughtUp.Next(ctx)
		require.NoError(t, err)
		require.Equal(t, "retry", label(c.Chunk))

		// A reader attached before the cleanup whose unread chunks were
		// removed gets a truncation error, not a silent gap.
		_, err = lagging.Next(ctx)
		var tr *helix.StreamTruncatedError
		require.ErrorAs(t, err, &tr)
		require.Equal(t, 1, tr.TruncatedAtStep)
		require.Equal(t, int64(6), tr.AtSequence)

		// A reader attached after the cleanup sees the survivors, no error.
		fresh, err := s.NewReader(ctx, id, nil)
		require.NoError(t, err)
		for _, want := range []string{"t1s1", "t1s2", "t1s3", "t2s1", "retry"} {
			c, err := fresh.Next(ctx)
			require.NoError(t, err)
			require.Equal(t, want, label(c.Chunk))
		}
		for _, r := range []store.Reader{caughtUp, behind, lagging, fresh} {
			require.NoError(t, r.Close())
		}

		// Without a floor every turn's later steps go.
		res, err = s.CleanupToStep(ctx, id, 1, 0)
		require.NoError(t, err)
		require.Equal(t, 3, res.Removed) // t1s2, t1s3, retry
	},
	"QueuedChunkKeepsOrderAndIsDurableAfterFlush": func(t *testing.T, s Store) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		st := newSession(t, s, "queue")
		w := s.NewWriter(st.StreamID, nil)
		require.NoError(t, w.Queue(ctx, toolStart(st.SessionID, 1, "queued"))) // a non-delta, not awaited
		require.NoError(t, w.Write(ctx, delta(st.SessionID, 1, "d")))
		require.NoError(t, w.Write(ctx, toolStart(st.SessionID, 1, "written"))) // awaited: everything before it too
		require.Equal(t, []string{"queued", "d", "written"}, labels(ctx, t, s, st.StreamID))
		require.NoError(t, w.Queue(ctx, toolStart(st.SessionID, 2, "last")))
		require.NoError(t, w.Close(ctx))
		require.Equal(t, []string{"queued", "d", "written", "last"}, labels(ctx, t, s, st.StreamID))
	},
	"ResetKeepsSequencesMonotonic": func(t *testing.T, s Store) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		st := newSession(t, s, "reset")
		id := st.StreamID
		_, err := s.Append(ctx, id, []store.ChunkWrite{{Chunk: delta(id, 1, "a")}, {Chunk: delta(id, 1, "b")}})
		require.NoError(t, err)
		require.NoError(t, s.EndStream(ctx, id, nil))
		r, err := s.NewReader(ctx, id, nil)
		require.NoError(t, err)
		require.NoError(t, s.ResetStream(ctx, id))
		_, err = r.Next(ctx)
		require.ErrorIs(t, err, helix.ErrStreamTruncated)
		require.NoError(t, r.Close())
		info, err := s.GetStreamInfo(ctx, id)
		require.NoError(t, err)
		require.Equal(t, helix.StreamActive, info.Status)
		require.Zero(t, info.ChunkCount)
		require.Equal(t, 1, info.TruncationEpoch)
		seq, err := s.Append(ctx, id, []store.ChunkWrite{{Chunk: delta(id, 1, "c")}})
		require.NoError(t, err)
		require.Equal(t, int64(4), seq, "sequence numbers are never reused")
	},
	"ReaderCancellationAndClose": func(t *testing.T, s Store) {
		st := newSession(t, s, "cancel")
		r, err := s.NewReader(t.Context(), st.StreamID, nil)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		_, err = r.Next(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded, "an idle stream blocks until the context ends")

		done := make(chan error, 1)
		go func() {
			_, err := r.Next(t.Context())
			done <- err
		}()
		require.NoError(t, r.Close())
		select {
		case err := <-done:
			require.Error(t, err, "Close releases a waiting Next")
		case <-time.After(10 * time.Second):
			t.Fatal("Next still blocked after Close")
		}
		require.NoError(t, r.Close(), "idempotent")
		require.Zero(t, r.Sequence())
	},
	"LiveChunkWakesReader": func(t *testing.T, s Store) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		st := newSession(t, s, "wake")
		r, err := s.NewReader(ctx, st.StreamID, nil)
		require.NoError(t, err)
		defer r.Close()
		got := make(chan store.StoredChunk, 1)
		go func() {
			c, err := r.Next(ctx)
			if err == nil {
				got <- c
			}
		}()
		w := s.NewWriter(st.StreamID, nil)
		require.NoError(t, w.Write(ctx, toolStart(st.StreamID, 1, "ping")))
		select {
		case c := <-got:
			require.Equal(t, "ping", label(c.Chunk))
			require.Equal(t, int64(1), r.Sequence())
			require.NotZero(t, c.Chunk.ChunkBase().Timestamp, "a missing timestamp is stamped at write time")
		case <-ctx.Done():
			t.Fatal("reader never woke up")
		}
	},
}
