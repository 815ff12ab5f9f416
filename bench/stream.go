package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// StreamAgentType is the agent type of the sessions the token-streaming
// phase creates (sessions with a stream, never run).
const StreamAgentType = "helix-bench-stream"

const (
	// streamInterval is the time between two deltas of a stream: 50 tokens
	// a second, a fast model.
	streamInterval = 20 * time.Millisecond
	// streamSlack bounds the token-streaming phase beyond the time its
	// writers take: a reader still waiting for a delta then is stuck.
	streamSlack = time.Minute
)

// streaming runs streams token streams together for deltas deltas each:
// one session per stream, a reader attached to it before the first write,
// and a writer that writes a text delta every streamInterval, the writers
// phase-shifted over the interval so they do not tick together. Each delta
// carries the wall-clock time it was written; its reader measures from it
// to Next returning it: the batch it waits for, the batch INSERT, the
// NOTIFY and the reader's fetch.
func (h *harness) streaming(ctx context.Context, streams, deltas int) (Streaming, error) {
	// The phase measures the store's stream path: its sessions (with a
	// stream, never run) and its writers are the store's own, on the
	// harness's traced pool; its readers are the engine's, as an
	// application's.
	st, err := postgres.New(h.pool)
	if err != nil {
		return Streaming{}, err
	}
	defer func() { _ = st.Close() }()
	ids := make([]string, streams)
	for i := range ids {
		ids[i] = h.sessionID()
		if _, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: ids[i], AgentType: StreamAgentType}); err != nil {
			return Streaming{}, fmt.Errorf("create the session of stream %d: %w", i+1, err)
		}
	}
	readers := make([]store.Reader, 0, streams)
	defer func() {
		for _, r := range readers {
			_ = r.Close()
		}
	}()
	for _, id := range ids {
		r, err := h.eng.Stream(ctx, id, 0)
		if err != nil {
			return Streaming{}, fmt.Errorf("read stream %s: %w", id, err)
		}
		readers = append(readers, r)
	}

	limit := time.Duration(deltas)*streamInterval + streamSlack
	tctx, cancelTimeout := context.WithTimeoutCause(ctx, limit, fmt.Errorf("token streams not read within %s", limit))
	defer cancelTimeout()
	// The first failure stops every writer and reader, and is the one
	// reported.
	pctx, fail := context.WithCancelCause(tctx)
	defer fail(nil)

	total := streams * deltas
	latencies := make([][]time.Duration, streams)
	var read atomic.Int64
	stop := h.streamProgress(&read, total)
	defer stop()
	before := st.StreamStats()
	cpu0, sql0 := sampleCPU(ctx, h.pool), h.tracer.snapshot()
	began := time.Now()
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			var err error
			if latencies[i], err = readDeltas(pctx, readers[i], deltas, &read); err != nil {
				fail(fmt.Errorf("stream %s: %w", id, err))
			}
		})
		wg.Go(func() {
			if err := writeDeltas(pctx, st.NewWriter(id, nil), id, deltas, streamInterval*time.Duration(i)/time.Duration(streams)); err != nil {
				fail(fmt.Errorf("stream %s: %w", id, err))
			}
		})
	}
	wg.Wait()
	wall := time.Since(began)
	sql1, cpu1 := h.tracer.snapshot(), sampleCPU(ctx, h.pool)
	after := st.StreamStats()
	if err := context.Cause(pctx); err != nil {
		return Streaming{}, err
	}

	var all []time.Duration
	for _, l := range latencies {
		all = append(all, l...)
	}
	s := Streaming{
		Streams:         streams,
		DeltasPerStream: deltas,
		Deltas:          total,
		IntervalMS:      ms(streamInterval),
		WallS:           round3(wall.Seconds()),
		ChunkToReader:   distribution(all),
		Inserts:         after.Batches - before.Batches,
		SQL:             profile(sql0, sql1, total, topStatements),
		CPU:             cpuProfile(cpu0, cpu1, total),
	}
	if chunks := after.Chunks - before.Chunks; chunks > 0 {
		s.InsertsPerDelta = round3(float64(s.Inserts) / float64(chunks))
	}
	return s, nil
}

// writeDeltas writes n text deltas to w, one every streamInterval after a
// first wait of shift, then closes w (which flushes it). Each delta is the
// Unix time in nanoseconds it was written.
func writeDeltas(ctx context.Context, w store.Writer, streamID string, n int, shift time.Duration) error {
	select {
	case <-time.After(shift):
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	tick := time.NewTicker(streamInterval)
	defer tick.Stop()
	for i := range n {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		now := time.Now()
		d := &helix.TextDeltaChunk{Base: helix.Base{AgentID: streamID, AgentType: StreamAgentType, Timestamp: now.UnixMilli(), Step: 1},
			Delta: strconv.FormatInt(now.UnixNano(), 10)}
		if err := w.Write(ctx, d); err != nil {
			return fmt.Errorf("write delta %d: %w", i+1, err)
		}
	}
	if err := w.Close(ctx); err != nil {
		return fmt.Errorf("close the writer: %w", err)
	}
	return nil
}

// readDeltas reads n text deltas from r and returns, for each, the time
// from its writing (the time it carries) to Next returning it.
func readDeltas(ctx context.Context, r store.Reader, n int, read *atomic.Int64) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for i := range n {
		c, err := r.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			return nil, fmt.Errorf("read delta %d: %w", i+1, err)
		}
		received := time.Now()
		d, ok := c.Chunk.(*helix.TextDeltaChunk)
		if !ok {
			return nil, fmt.Errorf("chunk %d is a %T, want a text delta", c.Sequence, c.Chunk)
		}
		sent, err := strconv.ParseInt(d.Delta, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("chunk %d: delta %q is not a send time: %w", c.Sequence, d.Delta, err)
		}
		out = append(out, received.Sub(time.Unix(0, sent)))
		read.Add(1)
	}
	return out, nil
}

// streamProgress reports the deltas read every two seconds until stop.
func (h *harness) streamProgress(read *atomic.Int64, total int) (stop func()) {
	return h.every2s(func() string { return fmt.Sprintf("token streaming: %d/%d deltas read", read.Load(), total) })
}
