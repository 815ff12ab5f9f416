package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// TakeoverSweepInterval bounds how often a launched engine looks for
// executors to take over (a tenth of its lease when that is shorter): a
// dead executor's sessions resume elsewhere within its lease plus this
// interval plus DBOS's queue polling (about a second).
const TakeoverSweepInterval = 2 * time.Second

// TakenOverRetention is how long the row of an executor that is gone
// (taken over, stopped or dead, with nothing pending) stays in
// helix.executors for operators (`helix-dbos doctor`) before the sweep
// deletes it.
const TakenOverRetention = 7 * 24 * time.Hour

// takeover is a launched engine's side of cluster takeover: it claims
// executors that stopped, died or let their lease expire, and recovers
// their pending workflows (DBOS re-enqueues them, and whichever engine of
// the same application dequeues each one resumes it from its last step).
type takeover struct {
	pool    *pgxpool.Pool
	id      string
	app     string
	version string
	// adopt are the earlier versions whose executors and queued workflows
	// this engine takes (Config.AdoptVersions).
	adopt []string
	ns    string // process.Namespace: whose pids this process can check
	lease time.Duration
	log   *zerolog.Logger
	// metrics count the takeovers (nil in tests that need none).
	metrics *steps.Metrics
	// formats reads the executors for the cluster's format level, and
	// this machine's dead ones for the sweep.
	formats *formats
}

// versions are the application versions this engine takes over: its own,
// then those it adopts.
func (t *takeover) versions() []string { return append([]string{t.version}, t.adopt...) }

// startTakeover starts the sweep; stop the returned loop at Shutdown.
func startTakeover(ctx context.Context, t *takeover) *loop {
	interval := min(TakeoverSweepInterval, t.lease/10)
	var sweeps int
	return every(ctx, interval, func(ctx context.Context) {
		// Executors without a row are a migration leftover: look for them
		// at the first sweep, then every minute or so.
		adopt := sweeps%int(max(1, time.Minute/interval)) == 0
		sweeps++
		if err := t.sweep(ctx, adopt); err != nil && ctx.Err() == nil {
			t.log.Warn().Err(err).Str("event", "executor.takeover_failed").
				Msg("takeover sweep failed; retrying at the next sweep (claimed executors are recovered then)")
		}
	})
}

// sweep claims the executors that may be taken over and recovers their
// pending workflows.
func (t *takeover) sweep(ctx context.Context, adopt bool) error {
	dead, err := t.formats.survey(ctx)
	if err != nil {
		return err
	}
	db := postgres.PgxQuerier(t.pool)
	scope := postgres.TakeoverScope{ExecutorID: t.id, AppName: t.app, Versions: t.versions()}
	claims, err := postgres.ClaimExecutors(ctx, db, scope, t.lease, dead)
	if err != nil {
		return fmt.Errorf("claim executors: %w", err)
	}
	if len(t.adopt) > 0 {
		n, err := postgres.AdoptQueuedWorkflows(ctx, db, t.version, t.adopt, t.app)
		if err != nil {
			return fmt.Errorf("adopt the queued workflows of versions %v: %w", t.adopt, err)
		}
		if n > 0 {
			t.log.Info().Str("event", "version.adopted_queued").Strs("versions", t.adopt).Int64("workflows", n).
				Msg("queued workflows of an earlier application version become this version's: engines of this version run them")
		}
	}
	if adopt {
		adopted, err := postgres.AdoptExecutors(ctx, db, scope, t.version)
		if err != nil {
			return fmt.Errorf("adopt executors without a row: %w", err)
		}
		claims = append(claims, adopted...)
		if err := postgres.PruneExecutors(ctx, db, TakenOverRetention); err != nil {
			return fmt.Errorf("prune executors taken over: %w", err)
		}
	}
	var errs []error
	for _, c := range claims {
		n, err := t.recover(ctx, c.ExecutorID)
		if errors.Is(err, errClaimLost) {
			t.log.Info().Str("event", "executor.takeover_lost").Str("executorId", c.ExecutorID).
				Msg("another engine finished taking this executor over first: " + err.Error())
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if t.metrics != nil {
			t.metrics.Takeovers.Inc()
			t.metrics.TakenWorkflows.Add(float64(n))
		}
		t.log.Info().Str("event", "executor.took_over").Str("executorId", c.ExecutorID).Bool("stopped", c.Stopped).
			Float64("silentSeconds", c.SilentSeconds).Int("workflows", n).
			Msg("took over an executor that stopped or died: its pending sessions resume in this cluster")
	}
	if len(errs) > 0 {
		return fmt.Errorf("recover executors (retried at the next sweep): %w", errors.Join(errs...))
	}
	return nil
}

// dbosRecoveryQueue is the queue DBOS re-enqueues recovered workflows on
// when they were not on a queue of their own (DBOS's internal queue, which
// every launched engine polls; models.InternalQueueName in DBOS Transact).
const dbosRecoveryQueue = "_dbos_internal_queue"

// errClaimLost reports a recovery that found its claim gone: another
// engine re-claimed the executor (this one was too slow) or it was
// already recovered. Nothing was re-enqueued.
var errClaimLost = errors.New("the claim is no longer this engine's (another engine re-claimed the executor, or it was recovered): nothing re-enqueued")

// recover re-enqueues dead's pending workflows and records the takeover as
// complete (postgres.RecoverExecutor); on failure it records the error and leaves the
// claim open, to be retried.
func (t *takeover) recover(ctx context.Context, dead string) (int, error) {
	db := postgres.PgxQuerier(t.pool)
	held, n, err := postgres.RecoverExecutor(ctx, db, postgres.TakeoverScope{ExecutorID: t.id, AppName: t.app, Versions: t.versions()},
		dead, dbosRecoveryQueue)
	if err == nil && !held {
		return 0, errClaimLost
	}
	if err != nil {
		err = fmt.Errorf("recover the pending workflows of executor %s: %w", dead, err)
		if uerr := postgres.RecordRecoveryError(ctx, db, dead, t.id, err.Error()); uerr != nil && ctx.Err() == nil {
			t.log.Warn().Err(uerr).Str("executorId", dead).Msg("could not record a failed takeover")
		}
		return 0, err
	}
	return n, nil
}
