package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// Two engines with the retention job never run a pass at once: while the
// first holds the lock (its pass held open until the second has tried),
// the second's passes and a CollectGarbage find it busy, and the passes
// recorded afterwards never overlap.
func TestRetentionPassesNeverOverlapAcrossEngines(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	var (
		mu      sync.Mutex
		inside  int
		overlap []string
		events  []string
		started int
	)
	busy := make(chan struct{}, 1)
	enough := make(chan struct{})
	held := make(chan struct{})
	var first atomic.Bool
	hook := func(name string) func(ctx context.Context, event string) {
		return func(ctx context.Context, event string) {
			mu.Lock()
			events = append(events, name+":"+event)
			switch event {
			case "started":
				inside++
				if inside > 1 {
					overlap = append(overlap, name)
				}
				if started++; started == 4 {
					close(enough)
				}
			case "finished":
				inside--
			case "busy":
				select {
				case busy <- struct{}{}:
				default:
				}
			}
			mu.Unlock()
			if event != "started" {
				return
			}
			// The first pass anywhere stays open until another one was
			// refused the lock.
			if first.CompareAndSwap(false, true) {
				close(held)
				select {
				case <-busy:
				case <-ctx.Done():
				}
			}
		}
	}
	policy := &RetentionPolicy{Completed: time.Hour, Interval: time.Second}
	engines := make([]*Engine, 2)
	for i, name := range []string{"a", "b"} {
		e, err := New(t.Context(), Config{DatabaseURL: url, Retention: policy, DisableTakeover: true, gcHook: hook(name)})
		require.NoError(t, err)
		require.NoError(t, e.Launch(t.Context()))
		t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
		engines[i] = e
		if i == 0 {
			<-held
		}
	}
	// A manual pass while a job's pass holds the lock is refused too.
	_, err := engines[1].CollectGarbage(t.Context(), *policy, nil)
	if !errors.Is(err, ErrGCBusy) {
		// The first pass may have ended (the second engine's job was
		// refused first); then this one ran alone.
		require.NoError(t, err)
	}
	select {
	case <-enough:
	case <-time.After(30 * time.Second):
		t.Fatal("fewer than 4 retention passes in 30s")
	}
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, overlap, "passes overlapped: %v", events)
	require.Contains(t, events, "b:busy", "the second engine found the lock taken: %v", events)
}
