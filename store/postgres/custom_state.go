package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/statepatch"
	"github.com/helix-agents/helix-dbos/store"
)

// MergeCustomState implements store.CustomState.
func (s *Store) MergeCustomState(ctx context.Context, sessionID string, patches []helix.PatchOp) ([]string, error) {
	var warnings []string
	err := s.tx(ctx, func(q Querier) error {
		var custom []byte
		err := q.QueryRow(ctx, `SELECT custom_state FROM helix.sessions WHERE session_id = $1 FOR UPDATE`, sessionID).Scan(&custom)
		if isNoRows(err) {
			return notFound("session", sessionID)
		}
		if err != nil {
			return err
		}
		next, w, err := statepatch.Apply(custom, patches)
		if err != nil {
			return err
		}
		warnings = w
		_, err = q.Exec(ctx, `UPDATE helix.sessions SET custom_state = $2, version = version + 1, updated_at = now()
			WHERE session_id = $1`, sessionID, []byte(next))
		return err
	})
	return warnings, wrap(err, "merge custom state of %s", sessionID)
}

// StageChanges implements store.Staging.
func (s *Store) StageChanges(ctx context.Context, sessionID, stepID, changeID string, patches []helix.PatchOp) error {
	if stepID == "" || changeID == "" {
		return fmt.Errorf("store: stage changes for %s: step ID and change ID are required", sessionID)
	}
	if patches == nil {
		patches = []helix.PatchOp{}
	}
	b, err := json.Marshal(patches)
	if err != nil {
		return fmt.Errorf("store: stage changes for %s: %w", sessionID, err)
	}
	_, err = s.q.Exec(ctx, `INSERT INTO helix.staging (session_id, step_id, change_id, patches) VALUES ($1, $2, $3, $4)
		ON CONFLICT (session_id, step_id, change_id) DO UPDATE SET patches = EXCLUDED.patches`,
		sessionID, stepID, changeID, b)
	return wrap(missingSession(err, sessionID), "stage changes for %s step %s", sessionID, stepID)
}

// GetStagedChanges implements store.Staging.
func (s *Store) GetStagedChanges(ctx context.Context, sessionID, stepID string) ([]store.StagedChange, error) {
	out, err := stagedChanges(ctx, s.q, sessionID, stepID)
	return out, wrap(err, "get staged changes for %s step %s", sessionID, stepID)
}

func stagedChanges(ctx context.Context, q Querier, sessionID, stepID string) ([]store.StagedChange, error) {
	rows, err := q.Query(ctx, `SELECT change_id, patches FROM helix.staging
		WHERE session_id = $1 AND step_id = $2 ORDER BY staged_seq`, sessionID, stepID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.StagedChange
	for rows.Next() {
		var c store.StagedChange
		var raw []byte
		if err := rows.Scan(&c.ChangeID, &raw); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, &c.Patches); err != nil {
			return nil, fmt.Errorf("decode staged change %s: %w", c.ChangeID, err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// HasStagedChanges implements store.Staging.
func (s *Store) HasStagedChanges(ctx context.Context, sessionID, stepID string) (bool, error) {
	var ok bool
	err := s.q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM helix.staging WHERE session_id = $1 AND step_id = $2)`,
		sessionID, stepID).Scan(&ok)
	return ok, wrap(err, "has staged changes for %s step %s", sessionID, stepID)
}

// PromoteStaging implements store.Staging.
func (s *Store) PromoteStaging(ctx context.Context, sessionID, stepID string) ([]string, error) {
	var warnings []string
	err := s.tx(ctx, func(q Querier) error {
		var custom []byte
		err := q.QueryRow(ctx, `SELECT custom_state FROM helix.sessions WHERE session_id = $1 FOR UPDATE`, sessionID).Scan(&custom)
		if isNoRows(err) {
			return notFound("session", sessionID)
		}
		if err != nil {
			return err
		}
		next, w, err := promote(ctx, q, sessionID, stepID, custom)
		if err != nil {
			return err
		}
		warnings = w
		_, err = q.Exec(ctx, `UPDATE helix.sessions SET custom_state = $2, version = version + 1, updated_at = now()
			WHERE session_id = $1`, sessionID, next)
		return err
	})
	return warnings, wrap(err, "promote staging for %s step %s", sessionID, stepID)
}

// promote applies and deletes a step's staged changes; the caller holds the
// session row lock and writes the returned custom state.
func promote(ctx context.Context, q Querier, sessionID, stepID string, custom []byte) ([]byte, []string, error) {
	changes, err := stagedChanges(ctx, q, sessionID, stepID)
	if err != nil {
		return nil, nil, err
	}
	var ops []helix.PatchOp
	for _, c := range changes {
		ops = append(ops, c.Patches...)
	}
	next, warnings, err := statepatch.Apply(custom, ops)
	if err != nil {
		return nil, nil, err
	}
	if _, err := q.Exec(ctx, `DELETE FROM helix.staging WHERE session_id = $1 AND step_id = $2`, sessionID, stepID); err != nil {
		return nil, nil, err
	}
	return next, warnings, nil
}

// DiscardStaging implements store.Staging.
func (s *Store) DiscardStaging(ctx context.Context, sessionID, stepID string) error {
	_, err := s.q.Exec(ctx, `DELETE FROM helix.staging WHERE session_id = $1 AND step_id = $2`, sessionID, stepID)
	return wrap(err, "discard staging for %s step %s", sessionID, stepID)
}

// CleanupOrphanedStaging implements store.Staging.
func (s *Store) CleanupOrphanedStaging(ctx context.Context, olderThan time.Duration) (int, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("store: cleanup orphaned staging: age must be >= 0, got %s", olderThan)
	}
	n, err := s.q.Exec(ctx, `DELETE FROM helix.staging WHERE created_at < now() - $1::interval`, olderThan)
	return int(n), wrap(err, "cleanup orphaned staging")
}

// SetInterruptFlag implements store.Interrupts.
func (s *Store) SetInterruptFlag(ctx context.Context, sessionID, reason string) error {
	n, err := s.q.Exec(ctx, `UPDATE helix.sessions SET interrupt_requested = true, interrupt_reason = $2
		WHERE session_id = $1`, sessionID, nullIfEmpty(reason))
	if err == nil && n == 0 {
		err = notFound("session", sessionID)
	}
	return wrap(err, "set interrupt flag of %s", sessionID)
}

// InterruptRequested reports whether session sessionID has an interrupt
// request, without taking it (CheckInterruptFlag takes it): for a watcher
// that cancels a running tool call.
func (s *Store) InterruptRequested(ctx context.Context, sessionID string) (bool, error) {
	var requested bool
	err := s.q.QueryRow(ctx, `SELECT interrupt_requested FROM helix.sessions WHERE session_id = $1`, sessionID).Scan(&requested)
	if isNoRows(err) {
		err = notFound("session", sessionID)
	}
	return requested, wrap(err, "read the interrupt flag of %s", sessionID)
}

// CheckInterruptFlag implements store.Interrupts. The common case (no
// request) is a single read; a request is cleared by a conditional update so
// exactly one of concurrent checkers observes it.
func (s *Store) CheckInterruptFlag(ctx context.Context, sessionID string) (store.InterruptRequest, error) {
	requested, err := s.InterruptRequested(ctx, sessionID)
	if err != nil || !requested {
		return store.InterruptRequest{}, err
	}
	var reason *string
	err = s.q.QueryRow(ctx, `UPDATE helix.sessions s SET interrupt_requested = false, interrupt_reason = NULL
		FROM (SELECT session_id, interrupt_reason FROM helix.sessions WHERE session_id = $1 FOR UPDATE) old
		WHERE s.session_id = old.session_id AND s.interrupt_requested
		RETURNING old.interrupt_reason`, sessionID).Scan(&reason)
	if isNoRows(err) {
		return store.InterruptRequest{}, nil // another checker took it
	}
	if err != nil {
		return store.InterruptRequest{}, wrap(err, "check interrupt flag of %s", sessionID)
	}
	r := store.InterruptRequest{Requested: true}
	if reason != nil {
		r.Reason = *reason
	}
	return r, nil
}

// ClearInterruptFlag implements store.Interrupts.
func (s *Store) ClearInterruptFlag(ctx context.Context, sessionID string) error {
	n, err := s.q.Exec(ctx, `UPDATE helix.sessions SET interrupt_requested = false, interrupt_reason = NULL
		WHERE session_id = $1`, sessionID)
	if err == nil && n == 0 {
		err = notFound("session", sessionID)
	}
	return wrap(err, "clear interrupt flag of %s", sessionID)
}
