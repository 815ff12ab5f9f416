package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// BenchmarkStreamLatency measures write-to-reader latency of text deltas:
// each of N streams has a writer emitting deltas at 50/s (random phase) and a
// live reader. b.N is the number of deltas per stream; use -benchtime=500x
// for stable tails. Reported: p50/p99 latency, deltas per INSERT statement.
func BenchmarkStreamLatency(b *testing.B) {
	for _, streams := range []int{1, 32} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			benchLatency(b, streams, 50)
		})
	}
}

func benchLatency(b *testing.B, streams, perSecond int) {
	st := newTestStore(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ids := make([]string, streams)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench-%d", i)
		if _, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: ids[i], AgentType: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
	var mu sync.Mutex
	latencies := make([]time.Duration, 0, streams*b.N)
	period := time.Second / time.Duration(perSecond)
	before := st.StreamStats()
	var wg sync.WaitGroup
	errs := make(chan error, 2*streams)
	b.ResetTimer()
	for i, id := range ids {
		r, err := st.NewReader(ctx, id, nil)
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(2)
		go func() { // reader
			defer wg.Done()
			defer r.Close()
			local := make([]time.Duration, 0, b.N)
			for range b.N {
				c, err := r.Next(ctx)
				if err != nil {
					errs <- err
					return
				}
				sent, _ := strconv.ParseInt(c.Chunk.(*helix.TextDeltaChunk).Delta, 10, 64)
				local = append(local, time.Since(time.Unix(0, sent)))
			}
			mu.Lock()
			latencies = append(latencies, local...)
			mu.Unlock()
		}()
		go func() { // writer, phase-shifted so streams do not tick together
			defer wg.Done()
			w := st.NewWriter(id, nil)
			time.Sleep(period * time.Duration(i) / time.Duration(streams))
			tick := time.NewTicker(period)
			defer tick.Stop()
			for range b.N {
				<-tick.C
				d := &helix.TextDeltaChunk{Base: helix.Base{AgentID: id, AgentType: "bench", Step: 1},
					Delta: strconv.FormatInt(time.Now().UnixNano(), 10)}
				if err := w.Write(ctx, d); err != nil {
					errs <- err
					return
				}
			}
			if err := w.Close(ctx); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	after := st.StreamStats()
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		return float64(latencies[int(p*float64(len(latencies)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(after.Chunks-before.Chunks)/float64(max(after.Batches-before.Batches, 1)), "deltas/insert")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkStreamWriteThroughput measures how many deltas per second the
// batcher stores when N writers write as fast as they can, without and
// with fences (store.Fence: each writer's workflow row locked by each
// batch, as an agent step's writer does).
func BenchmarkStreamWriteThroughput(b *testing.B) {
	for _, c := range []struct {
		streams int
		fenced  bool
	}{{1, false}, {32, false}, {1, true}, {32, true}} {
		b.Run(fmt.Sprintf("streams=%d,fenced=%v", c.streams, c.fenced), func(b *testing.B) {
			streams := c.streams
			var st *postgres.Store
			if c.fenced {
				st = newClusterStore(b, postgres.WithMaxBatch(512))
			} else {
				st = newTestStore(b, postgres.WithMaxBatch(512))
			}
			ctx := context.Background()
			ids := make([]string, streams)
			for i := range ids {
				ids[i] = fmt.Sprintf("tp-%d", i)
				if _, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: ids[i], AgentType: "bench"}); err != nil {
					b.Fatal(err)
				}
				if _, err := st.Pool().Exec(ctx, `INSERT INTO dbos.workflow_status (workflow_uuid, status, owner_xid, created_at)
					VALUES ($1, 'PENDING', 'owner', 0)`, ids[i]); c.fenced && err != nil {
					b.Fatal(err)
				}
			}
			per := max(b.N/streams, 1)
			before := st.StreamStats()
			start := time.Now()
			b.ResetTimer()
			var wg sync.WaitGroup
			for _, id := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var opts *store.WriterOptions
					if c.fenced {
						opts = &store.WriterOptions{Fence: &store.Fence{WorkflowID: id, Owner: "owner"}}
					}
					w := st.NewWriter(id, opts)
					d := &helix.TextDeltaChunk{Base: helix.Base{AgentID: id, AgentType: "bench", Step: 1, Timestamp: 1}, Delta: "token "}
					for range per {
						if err := w.Write(ctx, d); err != nil {
							b.Error(err)
							return
						}
					}
					if err := w.Close(ctx); err != nil {
						b.Error(err)
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			after := st.StreamStats()
			chunks := after.Chunks - before.Chunks
			b.ReportMetric(float64(chunks)/time.Since(start).Seconds(), "deltas/s")
			b.ReportMetric(float64(chunks)/float64(max(after.Batches-before.Batches, 1)), "deltas/insert")
		})
	}
}
