package postgres

import (
	"context"

	helix "github.com/helix-agents/helix-dbos"
)

// conversationCallsSQL reads the sessions of the conversation under root
// $1 with their pending calls: the root by its primary key, the others
// through sessions_root_idx (which holds sub-agents' sessions only).
const conversationCallsSQL = `SELECT session_id, COALESCE(parent_session_id, ''), COALESCE(suspended_step_id, ''), pending_client_tool_calls
	FROM helix.sessions WHERE session_id = $1 OR (root_session_id = $1 AND parent_session_id IS NOT NULL)`

// syncAwaiting recomputes, for a conversation (the sessions under
// rootSessionID), which sub-agents wait for human input: a child whose
// session or descendants hold an unanswered call has its reference on its
// parent at paused_awaiting_client, and every session above such a child
// has its current run at suspended_awaiting_children (a run already
// suspended on its own calls keeps suspended_client_tool). When nothing
// waits any more, those go back to running. A conversation without
// sub-agents costs one read.
func syncAwaiting(ctx context.Context, q Querier, rootSessionID string) error {
	rows, err := q.Query(ctx, conversationCallsSQL, rootSessionID)
	if err != nil {
		return err
	}
	parent := map[string]string{}
	waitsItself := map[string]bool{}
	for rows.Next() {
		var id, p, stepID string
		var raw []byte
		if err := rows.Scan(&id, &p, &stepID, &raw); err != nil {
			rows.Close()
			return err
		}
		parent[id] = p
		pending, err := decodePending(id, stepID, raw)
		if err != nil {
			rows.Close()
			return err
		}
		for _, c := range pending {
			if !c.Resolved() {
				waitsItself[id] = true
				break
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(parent) < 2 {
		return err
	}
	// subtreeWaits: the session or one of its descendants waits.
	subtreeWaits := map[string]bool{}
	for id := range waitsItself {
		for cur, seen := id, 0; cur != "" && seen <= len(parent); cur, seen = parent[cur], seen+1 {
			subtreeWaits[cur] = true
		}
	}
	for id, p := range parent {
		if p == "" {
			continue
		}
		ref := helix.SubSessionRunning
		from := helix.SubSessionPausedAwaitingClient
		if subtreeWaits[id] {
			ref, from = helix.SubSessionPausedAwaitingClient, helix.SubSessionRunning
		}
		if _, err := q.Exec(ctx, `UPDATE helix.sub_session_refs SET status = $3, updated_at = now()
			WHERE session_id = $1 AND sub_session_id = $2 AND status = $4`, p, id, string(ref), string(from)); err != nil {
			return err
		}
	}
	for id := range parent {
		childWaits := false
		for c, p := range parent {
			if p == id && subtreeWaits[c] {
				childWaits = true
				break
			}
		}
		to, from := helix.RunRunning, helix.RunSuspendedAwaitingChildren
		if childWaits {
			to, from = helix.RunSuspendedAwaitingChildren, helix.RunRunning
		}
		// A run whose sub-agents' waits for people all ended goes on in
		// place: answered, as a run whose own calls were (Resume returns a
		// handle on it however fast it went on).
		if _, err := q.Exec(ctx, `UPDATE helix.runs SET status = $2, updated_at = now(),
				answered_at = CASE WHEN $2 = 'running' THEN now() ELSE answered_at END
			WHERE run_id = (`+currentRun("run_id", "$1")+`) AND status = $3`,
			id, string(to), string(from)); err != nil {
			return err
		}
	}
	return nil
}
