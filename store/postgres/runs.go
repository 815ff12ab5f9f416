package postgres

import (
	"cmp"
	"context"
	"fmt"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// runColumns reads a run. A step's commit does not write its run's row
// while the run keeps running (commitStepSQL): a running run's step count
// and last update come from its session's checkpoint when the run wrote
// it (runProgressSQL), else from the row.
var runColumns = `run_id, session_id, turn, status,
	GREATEST(step_count, (SELECT c.step_count ` + runProgressSQL + `)), start_sequence, COALESCE(workflow_id, ''),
	COALESCE(previous_run_id, ''), COALESCE(error, ''), COALESCE(error_code, ''), queue, COALESCE(queue_partition_key, ''),
	COALESCE(queue_priority, 0), started_at, completed_at,
	GREATEST(updated_at, (SELECT c.created_at ` + runProgressSQL + `)), answered_at,
	CASE WHEN status NOT IN ('completed', 'failed', 'interrupted') THEN hibernated_at END,
	CASE WHEN status NOT IN ('completed', 'failed', 'interrupted') AND hibernated_at IS NOT NULL THEN to_timestamp(wake_at / 1000.0) END,
	wakes, CASE WHEN status NOT IN ('completed', 'failed', 'interrupted') THEN woken_at END`

// runProgressSQL finds the checkpoint a running run's last step wrote: the
// one its session points at, when it is the run's.
var runProgressSQL = `FROM helix.sessions s JOIN LATERAL (` + sessionCheckpointSQL + `) c ON true
	WHERE runs.status = 'running' AND s.session_id = runs.session_id AND c.run_id = runs.run_id`

func scanRun(row Row) (*store.Run, error) {
	var r store.Run
	var status string
	var queue *string
	var adm store.Admission
	if err := row.Scan(&r.RunID, &r.SessionID, &r.Turn, &status, &r.StepCount, &r.StartSequence, &r.WorkflowID,
		&r.PreviousRunID, &r.Error, &r.ErrorCode, &queue, &adm.PartitionKey, &adm.Priority, &r.StartedAt, &r.CompletedAt, &r.UpdatedAt, &r.AnsweredAt,
		&r.HibernatedAt, &r.WakeAt, &r.Wakes, &r.WokenAt); err != nil {
		return nil, err
	}
	r.Status = helix.RunStatus(status)
	if queue != nil {
		adm.Queue = *queue
		r.Admission = &adm
	}
	return &r, nil
}

// CreateRun implements store.Runs.
func (s *Store) CreateRun(ctx context.Context, p store.CreateRunParams) (*store.Run, error) {
	if err := validateID("run", p.RunID); err != nil {
		return nil, fmt.Errorf("store: create run: %w", err)
	}
	status := cmp.Or(p.Status, helix.RunRunning)
	if !status.Valid() {
		return nil, fmt.Errorf("store: create run %s: unknown status %q", p.RunID, status)
	}
	if p.Turn < 0 {
		return nil, fmt.Errorf("store: create run %s: turn must be >= 1 (or 0 for the next turn), got %d", p.RunID, p.Turn)
	}
	var run *store.Run
	err := s.tx(ctx, func(q Querier) error {
		// Lock the session so concurrent "next turn" allocations serialize.
		var one int
		err := q.QueryRow(ctx, `SELECT 1 FROM helix.sessions WHERE session_id = $1 FOR UPDATE`, p.SessionID).Scan(&one)
		if isNoRows(err) {
			return notFound("session", p.SessionID)
		}
		if err != nil {
			return err
		}
		var queue, partition, priority any
		if a := p.Admission; a != nil {
			queue, partition, priority = a.Queue, nullIfEmpty(a.PartitionKey), a.Priority
		}
		r, err := scanRun(q.QueryRow(ctx, `INSERT INTO helix.runs
			(run_id, session_id, turn, status, start_sequence, workflow_id, previous_run_id, queue, queue_partition_key, queue_priority)
			VALUES ($1, $2,
				CASE WHEN $3 > 0 THEN $3 ELSE (SELECT COALESCE(max(turn), 0) + 1 FROM helix.runs WHERE session_id = $2) END,
				$4, $5, $6, $7, $8, $9, $10)
			ON CONFLICT (run_id) DO NOTHING
			RETURNING `+runColumns,
			p.RunID, p.SessionID, p.Turn, string(status), p.StartSequence, nullIfEmpty(p.WorkflowID), nullIfEmpty(p.PreviousRunID),
			queue, partition, priority))
		if isNoRows(err) {
			// Retry after a lost acknowledgement: return what was stored.
			r, err = scanRun(q.QueryRow(ctx, `SELECT `+runColumns+` FROM helix.runs WHERE run_id = $1`, p.RunID))
			if err == nil && r.SessionID != p.SessionID {
				return fmt.Errorf("run ID %s already belongs to session %s", p.RunID, r.SessionID)
			}
		}
		if pgCode(err) == codeUniqueViolation {
			return fmt.Errorf("session %s already has a run for turn %d", p.SessionID, p.Turn)
		}
		run = r
		return err
	})
	return run, wrap(err, "create run %s", p.RunID)
}

// UpdateRunStatus implements store.Runs.
func (s *Store) UpdateRunStatus(ctx context.Context, runID string, status helix.RunStatus, u *store.RunUpdate) error {
	if !status.Valid() {
		return fmt.Errorf("store: update run %s: unknown status %q", runID, status)
	}
	var stepCount *int
	var errMsg, errCode any
	if u != nil {
		stepCount, errMsg, errCode = u.StepCount, nullIfEmpty(u.Error), nullIfEmpty(u.ErrorCode)
	}
	n, err := s.q.Exec(ctx, `UPDATE helix.runs SET status = $2, step_count = COALESCE($3, step_count),
			error = COALESCE($4, error), error_code = COALESCE($6, error_code),
			completed_at = CASE WHEN $5 THEN COALESCE(completed_at, now()) ELSE NULL END,
			hibernated_at = CASE WHEN $5 THEN NULL ELSE hibernated_at END, wake_at = CASE WHEN $5 THEN NULL ELSE wake_at END,
			woken_at = CASE WHEN $5 THEN NULL ELSE woken_at END,
			updated_at = now()
		WHERE run_id = $1`, runID, string(status), stepCount, errMsg, status.Final(), errCode)
	if err == nil && n == 0 {
		err = notFound("run", runID)
	}
	return wrap(err, "update run %s", runID)
}

// GetRun implements store.Runs.
func (s *Store) GetRun(ctx context.Context, runID string) (*store.Run, error) {
	r, err := scanRun(s.q.QueryRow(ctx, `SELECT `+runColumns+` FROM helix.runs WHERE run_id = $1`, runID))
	if isNoRows(err) {
		err = notFound("run", runID)
	}
	return r, wrap(err, "get run %s", runID)
}

// GetCurrentRun implements store.Runs.
func (s *Store) GetCurrentRun(ctx context.Context, sessionID string) (*store.Run, error) {
	r, err := scanRun(s.q.QueryRow(ctx, currentRun(runColumns, "$1"), sessionID))
	if isNoRows(err) {
		err = notFound("run of session", sessionID)
	}
	return r, wrap(err, "get current run of %s", sessionID)
}

// ListRuns implements store.Runs.
func (s *Store) ListRuns(ctx context.Context, sessionID string) ([]store.Run, error) {
	rows, err := s.q.Query(ctx, `SELECT `+runColumns+` FROM helix.runs WHERE session_id = $1 ORDER BY turn`, sessionID)
	if err != nil {
		return nil, wrap(err, "list runs of %s", sessionID)
	}
	defer rows.Close()
	var out []store.Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, wrap(err, "list runs of %s", sessionID)
		}
		out = append(out, *r)
	}
	return out, wrap(rows.Err(), "list runs of %s", sessionID)
}
