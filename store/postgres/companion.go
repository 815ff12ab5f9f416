package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

var _ store.CompanionStore = (*Store)(nil)

// companionSessionID is a companion's session ID: {parentSessionId}-agent-{name}.
func companionSessionID(parentSessionID, name string) string {
	return parentSessionID + "-agent-" + name
}

// DispatchCompanion implements store.CompanionStore.
func (s *Store) DispatchCompanion(ctx context.Context, p store.CompanionDispatchParams) (*store.CompanionDispatch, error) {
	if p.Kind != store.DispatchSpawn && p.Kind != store.DispatchSend {
		return nil, fmt.Errorf("store: dispatch companion: unknown kind %q", p.Kind)
	}
	var out *store.CompanionDispatch
	err := s.tx(ctx, func(q Querier) error {
		tx := s.WithQuerier(q)
		parent, _, err := lockTree(ctx, q, s, p.ParentSessionID, nil)
		if err != nil {
			return err
		}
		refused := func(format string, args ...any) error {
			out = &store.CompanionDispatch{Action: store.ActionRefused, Error: fmt.Sprintf(format, args...)}
			return nil
		}
		name := p.Name
		if name == "" {
			if p.Kind == store.DispatchSend {
				return refused("sendMessage needs the companion's name")
			}
			// {agentType}-{n}: n counts the companions of the type, skipping
			// a name already taken (say, given explicitly).
			var n int
			var taken []string
			if err := q.QueryRow(ctx, `SELECT count(*) FILTER (WHERE agent_type = $2), COALESCE(array_agg(name) FILTER (WHERE name IS NOT NULL), '{}')
				FROM helix.sub_session_refs WHERE session_id = $1 AND mode = 'persistent'`,
				parent.SessionID, p.AgentType).Scan(&n, &taken); err != nil {
				return err
			}
			for n++; slices.Contains(taken, fmt.Sprintf("%s-%d", p.AgentType, n)); n++ {
			}
			name = fmt.Sprintf("%s-%d", p.AgentType, n)
		}
		childID := companionSessionID(parent.SessionID, name)
		child, err := s.loadState(ctx, q, childID, true)
		if errors.Is(err, helix.ErrNotFound) {
			if p.Kind == store.DispatchSend {
				return refused("no companion named %q: spawn it first", name)
			}
			out, err = tx.spawnCompanion(ctx, p, parent, childID, name)
			return err
		}
		if err != nil {
			return err
		}
		if child.ParentSessionID != parent.SessionID || child.Mode != helix.SessionModePersistent {
			return refused("session %s is not a companion of this session", childID)
		}
		if p.Kind == store.DispatchSpawn && p.AgentType != "" && child.AgentType != p.AgentType {
			return refused("the companion %q is a %s, not a %s: choose another name", name, child.AgentType, p.AgentType)
		}
		marker := childID + "-continue-" + p.ToolCallID
		if child.Metadata[store.MetaDispatchCall] == p.ToolCallID {
			// A replay of this very dispatch: its run exists (or, for a
			// message into a running companion, its inbox row).
			run, err := tx.GetCurrentRun(ctx, childID)
			if err != nil {
				return err
			}
			out = &store.CompanionDispatch{Action: store.ActionStart, SessionID: childID, Name: name, AgentType: child.AgentType,
				RunID: run.RunID, WorkflowID: run.WorkflowID, How: "replayed"}
			return nil
		}
		// A message this call already put in the inbox (read or not):
		// delivered, whatever the companion did since.
		var sent bool
		if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM helix.inbox WHERE session_id = $1 AND message_id = $2)`,
			childID, p.ToolCallID).Scan(&sent); err != nil {
			return err
		}
		if sent {
			out = &store.CompanionDispatch{Action: store.ActionDelivered, SessionID: childID, Name: name, AgentType: child.AgentType}
			return nil
		}
		switch {
		case child.Status == helix.SessionActive && p.Kind == store.DispatchSpawn:
			return refused("the companion %q is running: send it a message (sendMessage) or wait for it", name)
		case child.Status == helix.SessionActive:
			msg, err := json.Marshal(helix.UserMessage(p.Message))
			if err != nil {
				return err
			}
			if _, err := q.Exec(ctx, `INSERT INTO helix.inbox (session_id, message_id, message) VALUES ($1, $2, $3)
				ON CONFLICT (session_id, message_id) DO NOTHING`, childID, p.ToolCallID, msg); err != nil {
				return err
			}
			out = &store.CompanionDispatch{Action: store.ActionDelivered, SessionID: childID, Name: name, AgentType: child.AgentType}
			return nil
		case child.Status == helix.SessionCompleted, child.Status == helix.SessionInterrupted:
			out, err = tx.continueCompanion(ctx, p, child, name, marker)
			return err
		default: // failed or terminated: a fresh start
			out, err = tx.respawnCompanion(ctx, p, child, name)
			return err
		}
	})
	if err != nil {
		return nil, wrap(err, "dispatch companion for %s", p.ParentSessionID)
	}
	return out, nil
}

// spawnCompanion creates a companion session and its first run.
func (s *Store) spawnCompanion(ctx context.Context, p store.CompanionDispatchParams, parent *store.SessionState, childID, name string) (*store.CompanionDispatch, error) {
	meta := maps.Clone(p.Metadata)
	if meta == nil {
		meta = map[string]string{}
	}
	// A companion has its own stream: it may outlive the parent's turn,
	// whose end ends the parent's stream.
	if _, err := s.CreateSession(ctx, store.CreateSessionParams{SessionID: childID, AgentType: p.AgentType,
		ParentSessionID: parent.SessionID, StreamID: childID, CustomState: p.InitialState, Mode: helix.SessionModePersistent,
		Metadata: meta, TracingContext: p.TracingContext}); err != nil {
		return nil, err
	}
	if err := s.AddSubSessionRefs(ctx, parent.SessionID, []store.SubSessionRef{{SubSessionID: childID, AgentType: p.AgentType,
		ParentToolCallID: p.ToolCallID, Status: helix.SubSessionRunning, Mode: helix.SubSessionPersistent, Name: name}}); err != nil {
		return nil, err
	}
	return s.startCompanionRun(ctx, p, childID, name, p.AgentType, childID+"-turn-1", "spawned")
}

// continueCompanion reopens a completed (or interrupted) companion for a
// new consultation, keeping its memory.
func (s *Store) continueCompanion(ctx context.Context, p store.CompanionDispatchParams, child *store.SessionState, name, workflowID string) (*store.CompanionDispatch, error) {
	how := "resumed"
	step := child.StepCount
	if child.Status == helix.SessionCompleted {
		how, step = "continued", 0
		if err := s.HealFinish(ctx, child); err != nil {
			return nil, err
		}
	}
	n, err := s.q.Exec(ctx, `UPDATE helix.sessions SET status = 'active', step_count = $3, output = NULL, error = NULL,
		failure_reason = NULL, interrupt_context = NULL, interrupt_requested = false, interrupt_reason = NULL,
		version = version + 1, updated_at = now()
		WHERE session_id = $1 AND status = $2`, child.SessionID, string(child.Status), step)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("companion %s changed status while it was consulted", child.SessionID)
	}
	return s.startCompanionRun(ctx, p, child.SessionID, name, child.AgentType, workflowID, how)
}

// respawnCompanion starts a failed or terminated companion from scratch.
func (s *Store) respawnCompanion(ctx context.Context, p store.CompanionDispatchParams, child *store.SessionState, name string) (*store.CompanionDispatch, error) {
	if _, err := s.DiscardPending(ctx, child.SessionID); err != nil {
		return nil, err
	}
	if err := s.TruncateMessages(ctx, child.SessionID, 0); err != nil {
		return nil, err
	}
	custom := p.InitialState
	if len(custom) == 0 {
		custom = json.RawMessage("{}")
	}
	if _, err := s.q.Exec(ctx, `UPDATE helix.sessions SET status = 'active', step_count = 0, custom_state = $2, output = NULL,
		error = NULL, failure_reason = NULL, interrupt_context = NULL, interrupt_requested = false, interrupt_reason = NULL,
		version = version + 1, updated_at = now() WHERE session_id = $1`, child.SessionID, []byte(custom)); err != nil {
		return nil, err
	}
	return s.startCompanionRun(ctx, p, child.SessionID, name, child.AgentType, child.SessionID+"-respawn-"+p.ToolCallID, "respawned")
}

// startCompanionRun appends the message, records the run and the marker,
// points the reference at the new run and announces it.
func (s *Store) startCompanionRun(ctx context.Context, p store.CompanionDispatchParams, childID, name, agentType, workflowID, how string) (*store.CompanionDispatch, error) {
	if _, err := s.AppendMessages(ctx, childID, []helix.Message{helix.UserMessage(p.Message)}); err != nil {
		return nil, err
	}
	callID := p.ToolCallID
	patch := map[string]*string{store.MetaWorkflowID: &workflowID, store.MetaDispatchCall: &callID}
	for k, v := range p.Metadata {
		patch[k] = &v
	}
	if _, err := s.PatchMetadata(ctx, childID, patch); err != nil {
		return nil, err
	}
	if _, err := s.q.Exec(ctx, `UPDATE helix.sub_session_refs r SET status = 'running', completed_at = NULL,
		completion_delivered = $3, parent_tool_call_id = $4, updated_at = now()
		WHERE r.session_id = $1 AND r.sub_session_id = $2`, p.ParentSessionID, childID, p.Blocking, p.ToolCallID); err != nil {
		return nil, err
	}
	st, err := s.loadState(ctx, s.q, childID, false)
	if err != nil {
		return nil, err
	}
	if st.StreamID == childID {
		if err := s.ReactivateStream(ctx, st.StreamID); err != nil {
			return nil, err
		}
	}
	latest, err := s.LatestSequence(ctx, st.StreamID)
	if err != nil {
		return nil, err
	}
	if _, err := s.CreateRun(ctx, store.CreateRunParams{RunID: p.RunID, SessionID: childID, StartSequence: latest,
		WorkflowID: workflowID}); err != nil {
		return nil, err
	}
	return &store.CompanionDispatch{Action: store.ActionStart, SessionID: childID, Name: name, AgentType: agentType,
		RunID: p.RunID, WorkflowID: workflowID, How: how}, nil
}

// HealFinish appends the missing results of a dangling __finish__ call
// at the end of st's log (the legacy reopen heal: a session that completed
// before the eager heal existed), and updates st.MessageCount. A session
// reopened for a new turn or consultation calls it first, so the model
// never sees a call without its result.
func (s *Store) HealFinish(ctx context.Context, st *store.SessionState) error {
	if st.MessageCount == 0 {
		return nil
	}
	page, err := s.GetMessages(ctx, st.SessionID, &store.GetMessagesOptions{Offset: st.MessageCount - 1, Limit: 1})
	if err != nil || len(page.Messages) == 0 {
		return err
	}
	var heal []helix.Message
	for _, c := range helix.UnpairedFinishCalls(page.Messages[0]) {
		heal = append(heal, helix.ToolResultMessage(c.ID, c.Name, helix.FinishAck))
	}
	if len(heal) == 0 {
		return nil
	}
	n, err := s.AppendMessages(ctx, st.SessionID, heal)
	if err == nil {
		st.MessageCount = n
	}
	return err
}

// Companion implements store.CompanionStore. The reference and the
// session are read by one statement, so they come from one snapshot: the
// commit that finishes a companion moves both at once, and a reader never
// sees the session completed (with its output) and the reference running.
func (s *Store) Companion(ctx context.Context, parentSessionID, name string) (*store.SubSessionRef, *store.SessionState, error) {
	var rs refScan
	row := s.q.QueryRow(ctx, `SELECT `+refColumns+`, c.*
		FROM helix.sub_session_refs r
		CROSS JOIN LATERAL (SELECT `+sessionColumns+` FROM helix.sessions WHERE session_id = r.sub_session_id) c
		WHERE r.session_id = $1 AND r.mode = 'persistent' AND r.name = $2
		ORDER BY r.created_seq LIMIT 1`, parentSessionID, name)
	st, err := scanSession(prefixedRow{row: row, prefix: rs.dest()})
	if isNoRows(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, wrap(err, "read companion %q of %s", name, parentSessionID)
	}
	r := rs.ref()
	return &r, st, nil
}

// prefixedRow scans the leading columns of a row into prefix and the rest
// into the destinations its caller passes, so a scanner of one table's
// columns (scanSession) reads a join.
type prefixedRow struct {
	row    Row
	prefix []any
}

func (p prefixedRow) Scan(dest ...any) error {
	return p.row.Scan(append(slices.Clip(p.prefix), dest...)...)
}

// TerminateCompanion implements store.CompanionStore.
func (s *Store) TerminateCompanion(ctx context.Context, parentSessionID, name, reason string) (string, error) {
	var workflowID string
	err := s.tx(ctx, func(q Querier) error {
		tx := s.WithQuerier(q)
		childID := companionSessionID(parentSessionID, name)
		if _, _, err := lockTree(ctx, q, s, childID, nil); err != nil {
			return err
		}
		child, err := s.loadState(ctx, q, childID, true)
		if err != nil {
			return err
		}
		if child.ParentSessionID != parentSessionID || child.Mode != helix.SessionModePersistent {
			return fmt.Errorf("session %s is not a companion of %s", childID, parentSessionID)
		}
		msg := "terminated by the parent"
		if reason != "" {
			msg += ": " + reason
		}
		if child.Status == helix.SessionActive || child.Status == helix.SessionInterrupted {
			run, err := tx.GetCurrentRun(ctx, childID)
			if err != nil {
				return err
			}
			if !run.Status.Final() {
				if run.HibernatedAt == nil { // a hibernated run has no workflow running
					workflowID = run.CurrentWorkflowID()
				}
				if err := tx.UpdateRunStatus(ctx, run.RunID, helix.RunFailed, &store.RunUpdate{Error: msg}); err != nil {
					return err
				}
			}
		}
		if _, err := q.Exec(ctx, `UPDATE helix.sessions SET status = 'failed', failure_reason = $2, error = $3,
			interrupt_requested = false, interrupt_reason = NULL, version = version + 1, updated_at = now()
			WHERE session_id = $1`, childID, store.FailureReasonTerminated, msg); err != nil {
			return err
		}
		// Its unanswered calls wait no more (and the ancestors waiting for
		// them follow).
		if _, err := tx.DiscardPending(ctx, childID); err != nil {
			return err
		}
		if err := setOwnRef(ctx, q, childID, helix.SubSessionTerminated); err != nil {
			return err
		}
		// The parent ended it: there is no outcome to deliver.
		_, err = q.Exec(ctx, `UPDATE helix.sub_session_refs SET completion_delivered = true WHERE session_id = $1 AND sub_session_id = $2`,
			parentSessionID, childID)
		return err
	})
	return workflowID, wrap(err, "terminate companion %s of %s", name, parentSessionID)
}

// DeliverCompletions implements store.CompanionStore.
func (s *Store) DeliverCompletions(ctx context.Context, parentSessionID string, message func(store.SubSessionRef, *store.SessionState) helix.Message) (int, error) {
	var n int
	err := s.tx(ctx, func(q Querier) error {
		tx := s.WithQuerier(q)
		if _, _, err := lockTree(ctx, q, s, parentSessionID, nil); err != nil {
			return err
		}
		rows, err := q.Query(ctx, `SELECT `+refColumns+`
			FROM helix.sub_session_refs r
			WHERE r.session_id = $1 AND r.mode = 'persistent' AND NOT r.completion_delivered
			  AND r.status IN ('completed', 'failed', 'terminated')
			ORDER BY r.completed_at, r.created_seq FOR UPDATE`, parentSessionID)
		if err != nil {
			return err
		}
		var refs []store.SubSessionRef
		for rows.Next() {
			var rs refScan
			if err := rows.Scan(rs.dest()...); err != nil {
				rows.Close()
				return err
			}
			refs = append(refs, rs.ref())
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(refs) == 0 {
			return err
		}
		msgs := make([]helix.Message, 0, len(refs))
		for _, r := range refs {
			child, err := tx.LoadState(ctx, r.SubSessionID)
			if err != nil {
				return err
			}
			msgs = append(msgs, message(r, child))
			if _, err := q.Exec(ctx, `UPDATE helix.sub_session_refs SET completion_delivered = true, updated_at = now()
				WHERE session_id = $1 AND sub_session_id = $2`, parentSessionID, r.SubSessionID); err != nil {
				return err
			}
		}
		n = len(msgs)
		_, err = tx.AppendMessages(ctx, parentSessionID, msgs)
		return err
	})
	return n, wrap(err, "deliver companion outcomes to %s", parentSessionID)
}

// MarkDelivered implements store.CompanionStore.
func (s *Store) MarkDelivered(ctx context.Context, parentSessionID, childSessionID string) error {
	_, err := s.q.Exec(ctx, `UPDATE helix.sub_session_refs SET completion_delivered = true, updated_at = now()
		WHERE session_id = $1 AND sub_session_id = $2`, parentSessionID, childSessionID)
	return wrap(err, "mark the outcome of %s delivered", childSessionID)
}
