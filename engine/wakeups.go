package engine

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/helix-agents/helix-dbos/recv"
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

// wakeSweepSQL notifies, once per call, the waits of this executor's
// pending workflows that have an unconsumed answer older than $3 (Unix ms
// on the engine's clock), or whose session has an interrupt request; and
// the drivers of queued runs (of this executor) whose segment ended in the
// minute before $6 (Unix ms, real time: DBOS stamps it) and whose
// outcome message is not taken (older ones find it at their next check,
// workflows.SegmentCheckInterval). The wait re-reads its messages when
// woken, so an extra wake-up is harmless.
//
// The sessions with pending calls are found through the index of those with
// a suspended step (helix.sessions_suspended_idx, migration 00032; the store
// keeps suspended_step_id set while calls are pending).
const wakeSweepSQL = `
SELECT count(pg_notify($1, w.payload)) FROM (
	SELECT DISTINCT (p.val->>'workflowId') || '::' || $2 || (p.val->>'toolCallId') AS payload
	FROM helix.sessions s
	CROSS JOIN LATERAL jsonb_each(s.pending_client_tool_calls) AS p(key, val)
	JOIN dbos.workflow_status ws ON ws.workflow_uuid = p.val->>'workflowId'
	WHERE s.suspended_step_id IS NOT NULL AND s.pending_client_tool_calls <> '{}'::jsonb
	  AND ws.status = 'PENDING' AND ws.executor_id = $4
	  AND ((p.val ? 'submission' AND NOT p.val ? 'consumedAt' AND (p.val->>'submittedAt')::bigint < $3)
	       OR s.interrupt_requested)
	UNION
	SELECT n.destination_uuid || '::' || n.topic
	FROM dbos.workflow_status seg
	JOIN dbos.workflow_status d ON d.workflow_uuid = seg.parent_workflow_id
	JOIN dbos.notifications n ON n.destination_uuid = d.workflow_uuid AND starts_with(n.topic, $5)
	WHERE seg.completed_at BETWEEN $6::bigint - 60000 AND $6::bigint AND seg.queue_name IS NOT NULL
	  AND d.status = 'PENDING' AND d.executor_id = $4 AND NOT n.consumed
) w`

// startWakeups starts the sweep for executorID's workflows; stop the
// returned loop at Shutdown. Answers are aged on clock, which stamped them
// (Config.Clock); DBOS's segment times on the real time.
func startWakeups(ctx context.Context, pool *pgxpool.Pool, executorID string, clock Clock, log *zerolog.Logger) *loop {
	return every(ctx, WakeSweepInterval, func(ctx context.Context) {
		var n int
		before := clock.Now().Add(-WakeSweepInterval).UnixMilli()
		segmentsBefore := time.Now().Add(-WakeSweepInterval).UnixMilli()
		err := pool.QueryRow(ctx, wakeSweepSQL, recv.NotifyChannel, recv.TopicPrefix, before, executorID, workflows.SegmentTopicPrefix,
			segmentsBefore).Scan(&n)
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
