package postgres

import (
	"context"
	"fmt"
	"time"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

var _ store.CascadeStore = (*Store)(nil)

// subtreeSQL lists a session and its descendants, parents first.
const subtreeSQL = `WITH RECURSIVE tree AS (
		SELECT session_id, 0 AS depth FROM helix.sessions WHERE session_id = $1
		UNION
		SELECT c.session_id, t.depth + 1 FROM helix.sessions c JOIN tree t ON c.parent_session_id = t.session_id
	)`

// InterruptTree implements store.CascadeStore.
func (s *Store) InterruptTree(ctx context.Context, sessionID, reason string) ([]string, error) {
	rows, err := s.q.Query(ctx, subtreeSQL+`
		UPDATE helix.sessions s SET interrupt_requested = true, interrupt_reason = $2
		FROM tree WHERE s.session_id = tree.session_id AND s.status = 'active'
		RETURNING s.session_id`, sessionID, nullIfEmpty(reason))
	if err != nil {
		return nil, wrap(err, "interrupt the sessions under %s", sessionID)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, wrap(err, "interrupt the sessions under %s", sessionID)
		}
		out = append(out, id)
	}
	return out, wrap(rows.Err(), "interrupt the sessions under %s", sessionID)
}

// ListSubtree implements store.CascadeStore.
func (s *Store) ListSubtree(ctx context.Context, sessionID string) ([]*store.SessionState, error) {
	rows, err := s.q.Query(ctx, subtreeSQL+`
		SELECT `+sessionColumns+` FROM helix.sessions JOIN tree USING (session_id) ORDER BY tree.depth, session_id`, sessionID)
	if err != nil {
		return nil, wrap(err, "list the sessions under %s", sessionID)
	}
	defer rows.Close()
	var out []*store.SessionState
	for rows.Next() {
		st, err := scanSession(rows)
		if err != nil {
			return nil, wrap(err, "list the sessions under %s", sessionID)
		}
		out = append(out, st)
	}
	return out, wrap(rows.Err(), "list the sessions under %s", sessionID)
}

// InterruptForChildren implements store.CascadeStore.
func (s *Store) InterruptForChildren(ctx context.Context, p store.InterruptForChildrenParams) (*store.InterruptForChildrenResult, error) {
	var res store.InterruptForChildrenResult
	err := s.tx(ctx, func(q Querier) error {
		tx := s.WithQuerier(q)
		sess, root, err := lockTree(ctx, q, s, p.SessionID, nil)
		if err != nil {
			return err
		}
		req, err := tx.CheckInterruptFlag(ctx, sess.SessionID)
		if err != nil || !req.Requested {
			return err // the children were interrupted on their own: the caller reads them as failures
		}
		res.Interrupted, res.InterruptReason = true, req.Reason
		awaiting, err := jsonObject(p.Children)
		if err != nil {
			return err
		}
		if _, err := q.Exec(ctx, `UPDATE helix.sessions SET suspended_step = $2,
			suspended_step_id = $3, pending_client_tool_calls = helix.pending_restated(pending_client_tool_calls, suspended_step_id, $3),
			suspended_awaiting_children = $4, version = version + 1, updated_at = now() WHERE session_id = $1`,
			sess.SessionID, rawOrNil(p.Record), nullIfEmpty(p.StepID), awaiting); err != nil {
			return err
		}
		msg := "the parent was interrupted (" + req.Reason + "): the sub-agent runs again when the parent resumes"
		for _, c := range p.Children {
			// An ephemeral child is failed (parent_suspended) and re-spawned
			// from scratch on resume; a persistent companion keeps its
			// memory: it stays interrupted and is continued on resume.
			n, err := q.Exec(ctx, `UPDATE helix.sessions SET status = 'failed', failure_reason = $2, error = $3,
				interrupt_requested = false, interrupt_reason = NULL, version = version + 1, updated_at = now()
				WHERE session_id = $1 AND status IN ('active', 'interrupted') AND mode IS DISTINCT FROM 'persistent'`,
				c.SubSessionID, helix.FailureReasonParentSuspended, msg)
			if err != nil {
				return err
			}
			ref := helix.SubSessionFailed
			if n == 0 {
				ref = helix.SubSessionInterrupted
			}
			if err := setOwnRef(ctx, q, c.SubSessionID, ref); err != nil {
				return err
			}
		}
		step := p.Step - 1
		if err := tx.UpdateStatus(ctx, sess.SessionID, helix.SessionInterrupted, &store.StatusUpdate{
			InterruptContext: &store.InterruptContext{Reason: req.Reason, StepCount: step, Timestamp: time.Now().UnixMilli()},
		}); err != nil {
			return err
		}
		if err := tx.UpdateRunStatus(ctx, p.RunID, helix.RunInterrupted, &store.RunUpdate{StepCount: &step, Error: req.Reason}); err != nil {
			return err
		}
		if p.Interrupted != nil {
			if err := tx.appendAll(ctx, sess, p.RunID, []helix.Chunk{p.Interrupted(req.Reason)}); err != nil {
				return err
			}
		}
		return syncAwaiting(ctx, q, root.SessionID)
	})
	if err != nil {
		return nil, wrap(err, "interrupt %s for its sub-agents", p.SessionID)
	}
	return &res, nil
}

// SaveChildWait implements store.CascadeStore.
func (s *Store) SaveChildWait(ctx context.Context, p store.SaveChildWaitParams) error {
	awaiting, err := jsonObject(p.Children)
	if err != nil {
		return wrap(err, "record the children %s waits for", p.SessionID)
	}
	n, err := s.q.Exec(ctx, `UPDATE helix.sessions SET suspended_step = $2,
		suspended_step_id = $3, pending_client_tool_calls = helix.pending_restated(pending_client_tool_calls, suspended_step_id, $3),
		suspended_awaiting_children = $4, version = version + 1, updated_at = now()
		WHERE session_id = $1 AND status = 'active'`, p.SessionID, rawOrNil(p.Record), nullIfEmpty(p.StepID), awaiting)
	if err == nil && n == 0 {
		err = fmt.Errorf("session %s is not active", p.SessionID)
	}
	return wrap(err, "record the children %s waits for", p.SessionID)
}

// RespawnChild implements store.CascadeStore.
func (s *Store) RespawnChild(ctx context.Context, p store.RespawnParams) (*store.Run, error) {
	var run *store.Run
	err := s.tx(ctx, func(q Querier) error {
		tx := s.WithQuerier(q)
		child, _, err := lockTree(ctx, q, s, p.SessionID, nil)
		if err != nil {
			return err
		}
		if child.Status != helix.SessionFailed || child.FailureReason != helix.FailureReasonParentSuspended {
			return fmt.Errorf("session %s is %s (%s): only a child failed because its parent was interrupted is re-spawned",
				child.SessionID, child.Status, child.FailureReason)
		}
		if _, err := tx.DiscardPending(ctx, child.SessionID); err != nil {
			return err
		}
		if err := tx.TruncateMessages(ctx, child.SessionID, p.KeepMessages); err != nil {
			return err
		}
		custom := p.CustomState
		if len(custom) == 0 {
			custom = []byte("{}")
		}
		if _, err := q.Exec(ctx, `UPDATE helix.sessions SET status = 'active', step_count = 0, custom_state = $2,
			output = NULL, error = NULL, failure_reason = NULL, interrupt_context = NULL,
			interrupt_requested = false, interrupt_reason = NULL, version = version + 1, updated_at = now()
			WHERE session_id = $1`, child.SessionID, []byte(custom)); err != nil {
			return err
		}
		if err := setOwnRef(ctx, q, child.SessionID, helix.SubSessionRunning); err != nil {
			return err
		}
		latest, err := tx.LatestSequence(ctx, child.StreamID)
		if err != nil {
			return err
		}
		run, err = tx.CreateRun(ctx, store.CreateRunParams{RunID: p.RunID, SessionID: child.SessionID,
			StartSequence: latest, WorkflowID: p.WorkflowID})
		return err
	})
	return run, wrap(err, "re-spawn sub-agent %s", p.SessionID)
}
