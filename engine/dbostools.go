package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/helix-agents/helix-dbos/store/postgres"
)

// CancelSweepInterval is how often a launched engine looks for sessions
// whose workflow was cancelled with DBOS's own tools (`dbos workflow
// cancel`, the DBOS client's CancelWorkflow) rather than Engine.Abort, and
// aborts them, so that a session never stays running with no workflow.
const CancelSweepInterval = 2 * time.Second

// cancelGrace is how long a cancelled workflow's session may stay active
// before the sweep aborts it: Engine.Abort cancels the workflow, then
// records the abort with its own reason a moment later.
const cancelGrace = 2 * time.Second

// cancelledByDBOS is the reason of a session aborted because its workflow
// was cancelled outside the engine.
func cancelledByDBOS(workflowID string) string {
	return fmt.Sprintf("its workflow %s was cancelled with DBOS's tools (dbos workflow cancel, or CancelWorkflow through a DBOS client); "+
		"abort sessions with helix-dbos sessions abort or Engine.Abort, and retry this one to run it again", workflowID)
}

// startCancelSweep starts the sweep (postgres.ListSessionsCancelledThroughDBOS
// finds the sessions, after cancelGrace); stop the returned loop at Shutdown.
func startCancelSweep(ctx context.Context, pool *pgxpool.Pool, c func() control, log *zerolog.Logger) *loop {
	return every(ctx, CancelSweepInterval, func(ctx context.Context) {
		list, err := postgres.ListSessionsCancelledThroughDBOS(ctx, postgres.PgxQuerier(pool), time.Now().Add(-cancelGrace).UnixMilli())
		if err != nil {
			if ctx.Err() == nil {
				log.Warn().Err(err).Str("event", "engine.cancel_sweep_failed").Msg("could not look for sessions cancelled through DBOS; retrying")
			}
			return
		}
		for _, f := range list {
			err := c().abort(ctx, f.SessionID, cancelledByDBOS(f.WorkflowID))
			var r *RefusedError
			switch {
			case errors.As(err, &r) && r.Code == RefusedNotRunning:
				// Aborted or finished meanwhile (another engine's sweep).
			case err != nil:
				if ctx.Err() == nil {
					log.Warn().Err(err).Str("event", "engine.cancel_sweep_failed").Str("sessionId", f.SessionID).
						Msg("could not abort a session whose workflow was cancelled through DBOS; retrying")
				}
			default:
				log.Warn().Str("event", "session.cancelled_through_dbos").Str("sessionId", f.SessionID).Str("workflowId", f.WorkflowID).
					Msg("a session's workflow was cancelled with DBOS's tools: the session is aborted")
			}
		}
	})
}
