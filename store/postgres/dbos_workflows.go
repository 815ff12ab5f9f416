package postgres

import (
	"context"
)

// The store's reads of DBOS's workflow table (dbos.workflow_status),
// alone or with the runs that own the workflows. DBOS writes the table;
// the engine reads it to fence its steps, to follow queued runs' segments,
// to find sessions whose workflow was cancelled or never started, and to
// revive a session DBOS resumed. Each runs on the Querier it is given and
// returns the driver's errors unwrapped, no row translated to found false.

// WorkflowStillOwned reports whether workflowID is pending under
// executorID and still owned by the execution whose owner token is owner
// (false when DBOS has no such workflow). Reads only.
func WorkflowStillOwned(ctx context.Context, q Querier, workflowID, executorID string, owner *string) (bool, error) {
	var ours bool
	err := q.QueryRow(ctx, `SELECT status = 'PENDING' AND executor_id = $2 AND owner_xid IS NOT DISTINCT FROM $3
		FROM dbos.workflow_status WHERE workflow_uuid = $1`, workflowID, executorID, owner).Scan(&ours)
	if isNoRows(err) {
		return false, nil
	}
	return ours, err
}

// ReadWorkflowStatus reads DBOS's status of workflowID (PENDING, ENQUEUED,
// SUCCESS, …); found is false when DBOS has no such workflow. Reads only.
func ReadWorkflowStatus(ctx context.Context, q Querier, workflowID string) (status string, found bool, err error) {
	err = q.QueryRow(ctx, `SELECT status FROM dbos.workflow_status WHERE workflow_uuid = $1`, workflowID).Scan(&status)
	if isNoRows(err) {
		return "", false, nil
	}
	return status, err == nil, err
}

// CancelledWorkflow is a DBOS workflow held as cancelled.
type CancelledWorkflow struct {
	// SessionID is the session whose run it serves (set by
	// ListSessionsCancelledThroughDBOS only).
	SessionID  string
	WorkflowID string
	// Queue is the DBOS queue it was on ("" when none; set by
	// ListCancelledRunWorkflows only).
	Queue string
}

// ListSessionsCancelledThroughDBOS lists the active sessions whose current
// run's workflow (its latest continuation, for a run woken from
// hibernation: the run's own workflow ended), or one of its segments (a
// queued run), DBOS holds as cancelled since before beforeMS (Unix ms),
// with the cancelled workflow's ID. It reads the live runs (partial index
// helix.runs_live_idx: not ended, not hibernated: a hibernated run's
// workflow ended, DBOS cannot cancel it) and probes each run's workflows
// (the workflow by primary key, its segments by parent): its cost follows
// the runs in progress, not the sessions that wait (with 88,000
// hibernated sessions, a sweep over every active session took seconds
// every two). An OR in one join would compare every cancelled workflow
// ever (aborted sessions leave theirs) with every live run. Reads only.
func ListSessionsCancelledThroughDBOS(ctx context.Context, q Querier, beforeMS int64) ([]CancelledWorkflow, error) {
	rows, err := q.Query(ctx, cancelledSessionsSQL, beforeMS)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []CancelledWorkflow
	for rows.Next() {
		var c CancelledWorkflow
		if err := rows.Scan(&c.SessionID, &c.WorkflowID); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

var cancelledSessionsSQL = `
SELECT s.session_id, w.workflow_uuid FROM helix.runs r
JOIN helix.sessions s ON s.session_id = r.session_id
JOIN LATERAL (
	SELECT workflow_uuid, status, updated_at FROM dbos.workflow_status
	WHERE workflow_uuid = helix.current_workflow_id(r.workflow_id, r.wakes)
	UNION ALL
	SELECT workflow_uuid, status, updated_at FROM dbos.workflow_status
	WHERE ` + segmentOf("", "r.workflow_id") + `
) w ON true
WHERE r.hibernated_at IS NULL AND r.completed_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM helix.runs n WHERE n.session_id = r.session_id AND n.turn > r.turn)
  AND s.status = 'active' AND w.status = 'CANCELLED' AND w.updated_at < $1`

// ListCancelledRunWorkflows lists the cancelled workflows of the run whose
// workflow is runWorkflowID: that one and its queued segments, with the
// queue each was on. Reads only.
func ListCancelledRunWorkflows(ctx context.Context, q Querier, runWorkflowID string) ([]CancelledWorkflow, error) {
	rows, err := q.Query(ctx, `SELECT workflow_uuid, coalesce(queue_name, '') FROM dbos.workflow_status
		WHERE status = 'CANCELLED' AND (workflow_uuid = $1 OR (`+segmentOf("", "$1")+`))`, runWorkflowID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []CancelledWorkflow
	for rows.Next() {
		var c CancelledWorkflow
		if err := rows.Scan(&c.WorkflowID, &c.Queue); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// ListOpenSegments lists the segments of the queued run whose driver is
// workflow driverID that are still queued, delayed or running (pending).
// Reads only.
func ListOpenSegments(ctx context.Context, q Querier, driverID string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT workflow_uuid FROM dbos.workflow_status
		WHERE status IN ('ENQUEUED', 'PENDING', 'DELAYED') AND `+segmentOf("", "$1"), driverID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// OrphanRun is a running run whose workflow DBOS never started.
type OrphanRun struct {
	SessionID  string
	RunID      string
	WorkflowID string
	AgentType  string
	// Queue, PartitionKey and Priority are its admission ("" queue:
	// direct).
	Queue        string
	PartitionKey string
	Priority     int
	// Wake, when not 0, makes the orphan a woken run (hibernated, then
	// woken): its workflow to start is continuation Wake of WorkflowID.
	Wake int
}

// ListOrphanRuns lists the running runs with a workflow ID that DBOS has
// no workflow for (a process stopped between recording the run and
// starting its workflow, or a run recorded in a caller's transaction that
// no engine has started yet), and the woken runs whose due continuation
// DBOS has no workflow for (OrphanRun.Wake), with their session's agent
// type and their admission. A sub-agent's or a companion's run is not
// listed while unstarted: its parent's workflow starts it, with the input
// that ties it to the parent (a queued parent's child reports to the
// parent's driver; a child of a parent that cannot hibernate waits in
// place), and a parent that stopped between recording it and starting it
// starts it when it is recovered; started here it would run as a root
// run. Its continuations, once it hibernated and woke, are listed. Reads
// only. It reads the running runs through
// the partial index runs_live_idx (the woken ones through runs_woken_idx)
// and probes dbos.workflow_status by its primary key for each: its cost
// follows the number of running runs, not the size of the tables, so
// engines run it every few seconds.
func ListOrphanRuns(ctx context.Context, q Querier) ([]OrphanRun, error) {
	return listOrphanRuns(ctx, q, "")
}

// listOrphanRuns is ListOrphanRuns, of one run when runID is set.
func listOrphanRuns(ctx context.Context, q Querier, runID string) ([]OrphanRun, error) {
	filter, args := "", []any(nil)
	if runID != "" {
		filter, args = "AND r.run_id = $1", []any{runID}
	}
	rows, err := q.Query(ctx, orphanRunsSQL(filter), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []OrphanRun
	for rows.Next() {
		var o OrphanRun
		if err := rows.Scan(&o.SessionID, &o.RunID, &o.WorkflowID, &o.AgentType, &o.Queue, &o.PartitionKey, &o.Priority, &o.Wake); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// orphanRunsSQL is listOrphanRuns' query, filter (SQL) narrowing both of
// its branches. A running run has no completed_at (runs_ended_check): the
// first branch names it anyway, with hibernated_at, so that the planner
// reads runs_live_idx, whose predicate they are.
func orphanRunsSQL(filter string) string {
	return `
SELECT r.session_id, r.run_id, r.workflow_id, s.agent_type, coalesce(r.queue, ''), coalesce(r.queue_partition_key, ''),
	coalesce(r.queue_priority, 0), 0 FROM helix.runs r JOIN helix.sessions s USING (session_id)
WHERE r.status = 'running' AND r.hibernated_at IS NULL AND r.completed_at IS NULL AND r.workflow_id IS NOT NULL AND r.workflow_id <> ''
  AND s.parent_session_id IS NULL
  ` + filter + `
  AND NOT EXISTS (SELECT 1 FROM dbos.workflow_status w WHERE w.workflow_uuid = r.workflow_id)
UNION ALL
SELECT r.session_id, r.run_id, r.workflow_id, s.agent_type, coalesce(r.queue, ''), coalesce(r.queue_partition_key, ''),
	coalesce(r.queue_priority, 0), r.wakes FROM helix.runs r JOIN helix.sessions s USING (session_id)
WHERE r.woken_at IS NOT NULL
  ` + filter + `
  AND NOT EXISTS (SELECT 1 FROM dbos.workflow_status w WHERE w.workflow_uuid = helix.wake_workflow_id(r.workflow_id, r.wakes))`
}
