package engine

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/helix-agents/helix-dbos/recv"
	"github.com/helix-agents/helix-dbos/store/postgres"
	"github.com/helix-agents/helix-dbos/workflows"
)

// WakeSweepInterval is how often a launched engine re-sends the wake-up of
// every run of its own that waits for human input while an answer (or an
// interrupt) for it is already recorded. A submission's wake-up is a
// Postgres NOTIFY that reaches the waiting run only if DBOS's listener was
// listening when it was sent; the sweep bounds the cost of one that was
// missed (for example a run recovered at Launch before the listener was up)
// to about this interval instead of an endless wait.
const WakeSweepInterval = time.Second

// startWakeups starts the sweep (postgres.ResendWakeups) for executorID's
// workflows; stop the
// returned loop at Shutdown. Answers are aged on clock, which stamped them
// (Config.Clock); DBOS's segment times on the real time.
func startWakeups(ctx context.Context, pool *pgxpool.Pool, executorID string, clock Clock, log *zerolog.Logger) *loop {
	return every(ctx, WakeSweepInterval, func(ctx context.Context) {
		n, err := postgres.ResendWakeups(ctx, postgres.PgxQuerier(pool), postgres.WakeSweep{
			Channel: recv.NotifyChannel, TopicPrefix: recv.TopicPrefix, ExecutorID: executorID,
			AnsweredBeforeMS:   clock.Now().Add(-WakeSweepInterval).UnixMilli(),
			SegmentTopicPrefix: workflows.SegmentTopicPrefix, SegmentsBeforeMS: time.Now().Add(-WakeSweepInterval).UnixMilli(),
		})
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn().Err(err).Str("event", "engine.wake_sweep_failed").Msg("could not re-send the wake-ups of waiting runs; retrying")
		case n > 0:
			log.Info().Str("event", "engine.wake_resent").Int("waits", n).
				Msg("re-sent the wake-up of runs whose answer was recorded but not taken")
		}
	})
}

// loop is a background task run every interval.
type loop struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// every runs fn at once and then every interval, in a goroutine of its
// own, until stop; fn's context ends at stop (not with ctx, whose values it
// keeps).
func every(ctx context.Context, interval time.Duration, fn func(ctx context.Context)) *loop {
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l := &loop{cancel: cancel}
	l.wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			fn(lctx)
			select {
			case <-lctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return l
}

// stop ends the loop and waits for a run in progress; a nil loop is a no-op.
func (l *loop) stop() {
	if l == nil {
		return
	}
	l.cancel()
	l.wg.Wait()
}
