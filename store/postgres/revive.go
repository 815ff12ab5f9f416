package postgres

import (
	"context"

	helix "github.com/helix-agents/helix-dbos"
)

// The statements that undo an abort when DBOS's own tools resumed the
// aborted session's workflow (the engine's revive): see engine/revive.go
// for when. They run on the store's querier: the engine runs the session's
// revival in one transaction, through WithQuerier.

// RunAbortState reads what revival needs of run runID: its status, error
// code ("" when none) and workflow ID ("" when none); found is false when
// the run's record is gone. One primary-key read. Reads only.
func (s *Store) RunAbortState(ctx context.Context, runID string) (status helix.RunStatus, code, workflowID string, found bool, err error) {
	err = s.q.QueryRow(ctx, `SELECT status, coalesce(error_code, ''), coalesce(workflow_id, '') FROM helix.runs WHERE run_id = $1`, runID).
		Scan(&status, &code, &workflowID)
	if isNoRows(err) {
		return "", "", "", false, nil
	}
	return status, code, workflowID, err == nil, err
}

// LockSessionStatus locks the row of sessionID (FOR UPDATE, until the
// transaction of the store's querier ends) and returns its status. Run it
// on a transaction (WithQuerier): on the pool the lock ends at once.
func (s *Store) LockSessionStatus(ctx context.Context, sessionID string) (helix.SessionStatus, error) {
	var status helix.SessionStatus
	err := s.q.QueryRow(ctx, `SELECT status FROM helix.sessions WHERE session_id = $1 FOR UPDATE`, sessionID).Scan(&status)
	return status, err
}

// ReactivateSession makes the failed session sessionID active again, its
// error cleared (a revival). Idempotent: an active session stays active
// (its version moves on).
func (s *Store) ReactivateSession(ctx context.Context, sessionID string) error {
	_, err := s.q.Exec(ctx, `UPDATE helix.sessions SET status = 'active', error = NULL, failure_reason = NULL,
			version = version + 1, updated_at = now() WHERE session_id = $1`, sessionID)
	return err
}

// ReactivateRun sets run runID back to status (running, or the wait it
// was in), its error and end cleared (a revival). Idempotent.
func (s *Store) ReactivateRun(ctx context.Context, runID string, status helix.RunStatus) error {
	_, err := s.q.Exec(ctx, `UPDATE helix.runs SET status = $2, error = NULL, error_code = NULL, completed_at = NULL,
			updated_at = now() WHERE run_id = $1`, runID, string(status))
	return err
}
