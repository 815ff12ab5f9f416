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
