package postgres

import (
	"cmp"
	"context"
	"fmt"
	"time"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// AddSubSessionRefs implements store.SubSessions.
func (s *Store) AddSubSessionRefs(ctx context.Context, sessionID string, refs []store.SubSessionRef) error {
	if len(refs) == 0 {
		return nil
	}
	n := len(refs)
	ids, types, calls := make([]string, n), make([]string, n), make([]string, n)
	statuses, modes, names := make([]string, n), make([]string, n), make([]*string, n)
	started := make([]time.Time, n)
	now := time.Now()
	for i, r := range refs {
		if r.SubSessionID == "" || r.AgentType == "" || r.ParentToolCallID == "" {
			return fmt.Errorf("store: add sub-session refs to %s: ref %d needs a sub-session ID, agent type and parent tool call ID", sessionID, i)
		}
		status := cmp.Or(r.Status, helix.SubSessionRunning)
		mode := cmp.Or(r.Mode, helix.SubSessionEphemeral)
		if !status.Valid() || !mode.Valid() {
			return fmt.Errorf("store: add sub-session refs to %s: ref %d has unknown status %q or mode %q", sessionID, i, status, mode)
		}
		ids[i], types[i], calls[i] = r.SubSessionID, r.AgentType, r.ParentToolCallID
		statuses[i], modes[i] = string(status), string(mode)
		if r.Name != "" {
			names[i] = &refs[i].Name
		}
		started[i] = cmp.Or(r.StartedAt, now)
	}
	_, err := s.q.Exec(ctx, `INSERT INTO helix.sub_session_refs
		(session_id, sub_session_id, agent_type, parent_tool_call_id, status, mode, name, started_at)
		SELECT $1, u.id, u.type, u.call, u.status, u.mode, u.name, u.started
		FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[])
			WITH ORDINALITY AS u(id, type, call, status, mode, name, started, ord)
		ORDER BY u.ord
		ON CONFLICT (session_id, sub_session_id) DO NOTHING`,
		sessionID, ids, types, calls, statuses, modes, names, started)
	return wrap(missingSession(err, sessionID), "add sub-session refs to %s", sessionID)
}

// UpdateSubSessionRef implements store.SubSessions. A final status
// (completed, failed, terminated) stamps the completion time once; any other
// (a re-consulted persistent child running again) clears it.
func (s *Store) UpdateSubSessionRef(ctx context.Context, sessionID string, u store.SubSessionRefUpdate) error {
	var status *string
	if u.Status != nil {
		if !u.Status.Valid() {
			return fmt.Errorf("store: update sub-session ref %s of %s: unknown status %q", u.SubSessionID, sessionID, *u.Status)
		}
		v := string(*u.Status)
		status = &v
	}
	n, err := s.q.Exec(ctx, `UPDATE helix.sub_session_refs SET status = COALESCE($3, status),
			completion_delivered = COALESCE($4, completion_delivered),
			completed_at = CASE
				WHEN $3::text IS NULL THEN completed_at
				WHEN $3 IN ('completed', 'failed', 'terminated') THEN COALESCE(completed_at, now())
				ELSE NULL END,
			updated_at = now()
		WHERE session_id = $1 AND sub_session_id = $2`,
		sessionID, u.SubSessionID, status, u.CompletionDelivered)
	if err == nil && n == 0 {
		err = notFound("sub-session reference", sessionID+"/"+u.SubSessionID)
	}
	return wrap(err, "update sub-session ref %s of %s", u.SubSessionID, sessionID)
}

// GetSubSessionRefs implements store.SubSessions.
func (s *Store) GetSubSessionRefs(ctx context.Context, sessionID string) ([]store.SubSessionRef, error) {
	rows, err := s.q.Query(ctx, `SELECT `+refColumns+`
		FROM helix.sub_session_refs r WHERE r.session_id = $1 ORDER BY r.created_seq`, sessionID)
	if err != nil {
		return nil, wrap(err, "get sub-session refs of %s", sessionID)
	}
	defer rows.Close()
	var out []store.SubSessionRef
	for rows.Next() {
		var rs refScan
		if err := rows.Scan(rs.dest()...); err != nil {
			return nil, wrap(err, "get sub-session refs of %s", sessionID)
		}
		out = append(out, rs.ref())
	}
	return out, wrap(rows.Err(), "get sub-session refs of %s", sessionID)
}

// SubSessionTree returns the tree of the sessions a session started (its
// sub-agents and companions, theirs nested under them) in one query: its
// first limit sessions depth first, each session's children in the order
// they were started, and whether the tree holds more. limit defaults to
// and is capped at store.MaxPageSize. A session that started none, or no
// session at all, has an empty tree.
//
// The query reads no more than it might return: a sub-session is read only
// if the sessions that must come before it (depth first) do not already
// fill the tree, so a long history of sub-agents costs no more than a short
// one. (A reference cycle, which sub-session IDs derived from their
// parent's make impossible, would end at its first repeat.)
func (s *Store) SubSessionTree(ctx context.Context, sessionID string, limit int) (*store.SubSessionTree, error) {
	limit = pageLimit(limit, store.MaxPageSize)
	rows, err := s.q.Query(ctx, subSessionTreeSQL, sessionID, int64(limit)+1)
	if err != nil {
		return nil, wrap(err, "read the sub-session tree of %s", sessionID)
	}
	defer rows.Close()
	var flat []treeRow
	for rows.Next() {
		var tr treeRow
		if err := rows.Scan(append([]any{&tr.depth}, tr.rs.dest()...)...); err != nil {
			return nil, wrap(err, "read the sub-session tree of %s", sessionID)
		}
		flat = append(flat, tr)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(err, "read the sub-session tree of %s", sessionID)
	}
	tree := &store.SubSessionTree{Truncated: len(flat) > limit}
	if tree.Truncated {
		flat = flat[:limit] // a prefix of a depth-first order is a tree
	}
	i := 0
	tree.Children = nestTree(flat, &i, 1)
	return tree, nil
}

// subSessionTreeSQL reads a session's sub-session tree depth first, at most
// $2 sessions. Each row carries least, a lower bound of its position depth
// first (its parent's bound plus its rank among its siblings: every earlier
// sibling, and the parent, come before it), and a session's children are
// read only while that bound stays within $2. path orders the rows depth
// first (created_seq is unique and increasing); seen stops a cycle.
const subSessionTreeSQL = `WITH RECURSIVE tree AS (
		SELECT c.*, ARRAY[c.created_seq] AS path, ARRAY[$1::text, c.sub_session_id] AS seen, c.rank AS least
		FROM (SELECT r.*, row_number() OVER (ORDER BY r.created_seq) AS rank
			FROM helix.sub_session_refs r WHERE r.session_id = $1 ORDER BY r.created_seq LIMIT $2) c
		UNION ALL
		SELECT c.*, t.path || c.created_seq, t.seen || c.sub_session_id, t.least + c.rank
		FROM tree t CROSS JOIN LATERAL (SELECT r.*, row_number() OVER (ORDER BY r.created_seq) AS rank
			FROM helix.sub_session_refs r WHERE r.session_id = t.sub_session_id ORDER BY r.created_seq LIMIT $2 - t.least) c
		WHERE c.sub_session_id <> ALL (t.seen)
	)
	SELECT cardinality(r.path), ` + refColumns + ` FROM tree r ORDER BY r.path LIMIT $2`

// treeRow is a row of subSessionTreeSQL: a sub-session and its depth (1:
// a child of the tree's session).
type treeRow struct {
	depth int
	rs    refScan
}

// nestTree nests the rows, depth first from *i, of the sessions at depth
// and their descendants.
func nestTree(flat []treeRow, i *int, depth int) []store.SubSessionNode {
	nodes := []store.SubSessionNode{}
	for *i < len(flat) && flat[*i].depth == depth {
		ref := flat[*i].rs.ref()
		*i++
		nodes = append(nodes, store.SubSessionNode{SubSessionRef: ref, Children: nestTree(flat, i, depth+1)})
	}
	return nodes
}

// refColumns is the column list of a sub-session reference (table alias r)
// that refScan reads, in order.
const refColumns = `r.sub_session_id, r.agent_type, r.parent_tool_call_id, r.status, r.mode, COALESCE(r.name, ''),
	r.completion_delivered, r.started_at, r.completed_at`

// refScan receives refColumns.
type refScan struct {
	r            store.SubSessionRef
	status, mode string
}

func (rs *refScan) dest() []any {
	return []any{&rs.r.SubSessionID, &rs.r.AgentType, &rs.r.ParentToolCallID, &rs.status, &rs.mode, &rs.r.Name,
		&rs.r.CompletionDelivered, &rs.r.StartedAt, &rs.r.CompletedAt}
}

func (rs *refScan) ref() store.SubSessionRef {
	r := rs.r
	r.Status, r.Mode = helix.SubSessionStatus(rs.status), helix.SubSessionMode(rs.mode)
	return r
}

// RecordUsage implements store.Usage.
func (s *Store) RecordUsage(ctx context.Context, rows []store.UsageRecord) error {
	for i, r := range rows {
		if r.SessionID == "" || r.SourceType == "" || r.Key == "" {
			return fmt.Errorf("store: record usage: row %d needs a session ID, source type and key", i)
		}
		err := execLater(ctx, s.q, `INSERT INTO helix.usage (session_id, run_id, step, source_type, source_name,
				input_tokens, output_tokens, cached_tokens, cache_write_tokens, value, duration_ms, success, key)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
			ON CONFLICT (session_id, key) DO NOTHING`,
			r.SessionID, nullIfEmpty(r.RunID), r.Step, r.SourceType, nullIfEmpty(r.SourceName),
			r.InputTokens, r.OutputTokens, r.CachedTokens, r.CacheWriteTokens, r.Value, r.DurationMS, r.Success, r.Key)
		if err != nil {
			return wrap(missingSession(err, r.SessionID), "record usage for %s", r.SessionID)
		}
	}
	return nil
}

// ListUsage implements store.Usage.
func (s *Store) ListUsage(ctx context.Context, sessionID string) ([]store.UsageRecord, error) {
	rows, err := s.q.Query(ctx, `SELECT session_id, COALESCE(run_id, ''), COALESCE(step, 0), source_type,
			COALESCE(source_name, ''), input_tokens, output_tokens, cached_tokens, cache_write_tokens, value,
			duration_ms, success, key, created_at
		FROM helix.usage_records WHERE session_id = $1 ORDER BY created_at, seq_a, seq_b`, sessionID)
	if err != nil {
		return nil, wrap(err, "list usage of %s", sessionID)
	}
	defer rows.Close()
	var out []store.UsageRecord
	for rows.Next() {
		var r store.UsageRecord
		if err := rows.Scan(&r.SessionID, &r.RunID, &r.Step, &r.SourceType, &r.SourceName, &r.InputTokens,
			&r.OutputTokens, &r.CachedTokens, &r.CacheWriteTokens, &r.Value, &r.DurationMS, &r.Success, &r.Key,
			&r.CreatedAt); err != nil {
			return nil, wrap(err, "list usage of %s", sessionID)
		}
		out = append(out, r)
	}
	return out, wrap(rows.Err(), "list usage of %s", sessionID)
}
