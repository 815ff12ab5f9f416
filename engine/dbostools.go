package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/helix-agents/helix-dbos/workflows"
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

// cancelledSQL lists the active sessions whose current run's workflow, or
// one of its segments (a queued run), DBOS holds as cancelled since more
// than $1 ms (Unix), with the cancelled workflow's ID.
// Two index probes per active session (the workflow by primary key, its
// segments by parent): an OR in one join would compare every cancelled
// workflow ever (aborted sessions leave theirs) with every active session.
var cancelledSQL = `
SELECT s.session_id, w.workflow_uuid FROM helix.sessions s
JOIN LATERAL (SELECT workflow_id FROM helix.runs WHERE session_id = s.session_id ORDER BY turn DESC LIMIT 1) r ON true
JOIN LATERAL (
	SELECT workflow_uuid, status, updated_at FROM dbos.workflow_status WHERE workflow_uuid = r.workflow_id
	UNION ALL
	SELECT workflow_uuid, status, updated_at FROM dbos.workflow_status
	WHERE parent_workflow_id = r.workflow_id AND starts_with(workflow_uuid, r.workflow_id || '` + workflows.SegmentPrefix("") + `')
) w ON true
WHERE s.status = 'active' AND w.status = 'CANCELLED' AND w.updated_at < $1`

// cancelledByDBOS is the reason of a session aborted because its workflow
// was cancelled outside the engine.
func cancelledByDBOS(workflowID string) string {
	return fmt.Sprintf("its workflow %s was cancelled with DBOS's tools (dbos workflow cancel, or CancelWorkflow through a DBOS client); "+
		"abort sessions with helix-dbos sessions abort or Engine.Abort, and retry this one to run it again", workflowID)
}

// startCancelSweep starts the sweep; stop the returned loop at Shutdown.
func startCancelSweep(ctx context.Context, pool *pgxpool.Pool, c func() control, log *zerolog.Logger) *loop {
	return every(ctx, CancelSweepInterval, func(ctx context.Context) {
		type found struct{ Session, Workflow string }
		rows, _ := pool.Query(ctx, cancelledSQL, time.Now().Add(-cancelGrace).UnixMilli())
		list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[found])
		if err != nil {
			if ctx.Err() == nil {
				log.Warn().Err(err).Str("event", "engine.cancel_sweep_failed").Msg("could not look for sessions cancelled through DBOS; retrying")
			}
			return
		}
		for _, f := range list {
			err := c().abort(ctx, f.Session, cancelledByDBOS(f.Workflow))
			var r *RefusedError
			switch {
			case errors.As(err, &r) && r.Code == RefusedNotRunning:
				// Aborted or finished meanwhile (another engine's sweep).
			case err != nil:
				if ctx.Err() == nil {
					log.Warn().Err(err).Str("event", "engine.cancel_sweep_failed").Str("sessionId", f.Session).
						Msg("could not abort a session whose workflow was cancelled through DBOS; retrying")
				}
			default:
				log.Warn().Str("event", "session.cancelled_through_dbos").Str("sessionId", f.Session).Str("workflowId", f.Workflow).
					Msg("a session's workflow was cancelled with DBOS's tools: the session is aborted")
			}
		}
	})
}
