package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/statepatch"
	"github.com/helix-agents/helix-dbos/store"
)

// maxIDLength bounds session IDs (derived IDs nest, so leave room).
const maxIDLength = 1024

func validateID(kind, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%s ID is empty", kind)
	case len(id) > maxIDLength:
		return fmt.Errorf("%s ID is %d bytes, longer than the %d allowed", kind, len(id), maxIDLength)
	case strings.ContainsRune(id, 0):
		return fmt.Errorf("%s ID contains a NUL byte", kind)
	}
	return nil
}

// CreateSession implements store.Sessions.
func (s *Store) CreateSession(ctx context.Context, p store.CreateSessionParams) (*store.SessionState, error) {
	if err := validateID("session", p.SessionID); err != nil {
		return nil, fmt.Errorf("store: create session: %w", err)
	}
	if p.AgentType == "" {
		return nil, fmt.Errorf("store: create session %s: agent type is empty", p.SessionID)
	}
	if p.ParentSessionID == p.SessionID {
		return nil, fmt.Errorf("store: create session %s: a session cannot be its own parent", p.SessionID)
	}
	if p.Mode != "" && !p.Mode.Valid() {
		return nil, fmt.Errorf("store: create session %s: unknown mode %q (want standard or persistent)", p.SessionID, p.Mode)
	}
	custom := p.CustomState
	if len(custom) == 0 {
		custom = json.RawMessage("{}")
	}
	if !statepatch.IsObject(custom) {
		return nil, fmt.Errorf("store: create session %s: custom state must be a JSON object", p.SessionID)
	}
	metadata, err := jsonObject(p.Metadata)
	if err != nil {
		return nil, fmt.Errorf("store: create session %s: metadata: %w", p.SessionID, err)
	}
	tracing, err := jsonOrNil(p.TracingContext)
	if err != nil {
		return nil, fmt.Errorf("store: create session %s: tracing context: %w", p.SessionID, err)
	}
	var created *store.SessionState
	err = s.tx(ctx, func(q Querier) error {
		var parentRoot, parentStream string
		if p.ParentSessionID != "" {
			err := q.QueryRow(ctx, `SELECT root_session_id, stream_id FROM helix.sessions WHERE session_id = $1`,
				p.ParentSessionID).Scan(&parentRoot, &parentStream)
			if isNoRows(err) {
				return notFound("parent session", p.ParentSessionID)
			}
			if err != nil {
				return err
			}
		}
		root := cmp.Or(p.RootSessionID, parentRoot, p.SessionID)
		streamID := cmp.Or(p.StreamID, parentStream, p.SessionID)
		row := q.QueryRow(ctx, `INSERT INTO helix.sessions
			(session_id, agent_type, stream_id, parent_session_id, root_session_id, custom_state, mode,
			 user_id, tags, metadata, tracing_context, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, COALESCE($9::text[], '{}'), $10, $11, $12)
			ON CONFLICT (session_id) DO NOTHING
			RETURNING `+sessionColumns,
			p.SessionID, p.AgentType, streamID, nullIfEmpty(p.ParentSessionID), root, []byte(custom),
			nullIfEmpty(string(p.Mode)), nullIfEmpty(p.UserID), p.Tags, metadata, tracing, timeOrNil(p.ExpiresAt))
		st, err := scanSession(row)
		if isNoRows(err) {
			return &helix.SessionExistsError{SessionID: p.SessionID}
		}
		if err != nil {
			return err
		}
		if streamID == p.SessionID {
			if _, err := q.Exec(ctx, `INSERT INTO helix.streams (stream_id, owner_session_id) VALUES ($1, $1)
				ON CONFLICT (stream_id) DO UPDATE
				SET owner_session_id = COALESCE(helix.streams.owner_session_id, EXCLUDED.owner_session_id)`,
				p.SessionID); err != nil {
				return fmt.Errorf("register stream: %w", err)
			}
		}
		created = st
		return nil
	})
	if err != nil {
		return nil, wrap(err, "create session %s", p.SessionID)
	}
	return created, nil
}

// SessionExists implements store.Sessions.
func (s *Store) SessionExists(ctx context.Context, sessionID string) (bool, error) {
	var ok bool
	err := s.q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM helix.sessions WHERE session_id = $1)`, sessionID).Scan(&ok)
	if err != nil {
		return false, wrap(err, "session exists %s", sessionID)
	}
	return ok, nil
}

// LoadState implements store.Sessions.
func (s *Store) LoadState(ctx context.Context, sessionID string) (*store.SessionState, error) {
	st, err := s.loadState(ctx, s.q, sessionID, false)
	if err != nil {
		return nil, wrap(err, "load state %s", sessionID)
	}
	return st, nil
}

func (s *Store) loadState(ctx context.Context, q Querier, sessionID string, forUpdate bool) (*store.SessionState, error) {
	sql := `SELECT ` + sessionColumns + ` FROM helix.sessions WHERE session_id = $1`
	if forUpdate {
		sql += ` FOR UPDATE`
	}
	st, err := scanSession(q.QueryRow(ctx, sql, sessionID))
	if isNoRows(err) {
		return nil, notFound("session", sessionID)
	}
	return st, err
}

// mutableSet assigns every field SaveState writes; $1 is the session ID and
// $2..$20 come from mutableArgs.
var mutableSet = `status = $2, step_count = $3, custom_state = $4, output = $5, error = $6,
	failure_reason = $7, interrupt_context = $8, pending_client_tool_calls = $9,
	suspended_awaiting_children = $10,
	suspended_step_id = $11, completed_client_tool_calls = $12,
	client_tool_call_ownership = $13, mode = COALESCE($14, mode), user_id = $15,
	tags = COALESCE($16::text[], '{}'), metadata = $17, tracing_context = $18, expires_at = $19,
	suspended_step = $20, version = version + 1, updated_at = now()`

func mutableArgs(st *store.SessionState) ([]any, error) {
	if st == nil {
		return nil, errors.New("state is nil")
	}
	if !st.Status.Valid() {
		return nil, fmt.Errorf("unknown status %q", st.Status)
	}
	if st.Mode != "" && !st.Mode.Valid() {
		return nil, fmt.Errorf("unknown mode %q (want standard or persistent)", st.Mode)
	}
	custom := st.CustomState
	if len(custom) == 0 {
		custom = json.RawMessage("{}")
	}
	if !statepatch.IsObject(custom) {
		return nil, errors.New("custom state must be a JSON object")
	}
	if len(st.Output) > 0 && !json.Valid(st.Output) {
		return nil, errors.New("output is not valid JSON")
	}
	ic, err := jsonOrNil(st.InterruptContext)
	if err != nil {
		return nil, err
	}
	pending, err := encodePending(st.SessionID, st.SuspendedStepID, st.PendingClientToolCalls)
	if err != nil {
		return nil, err
	}
	awaiting, err := jsonObject(st.SuspendedAwaitingChildren)
	if err != nil {
		return nil, err
	}
	completed, err := jsonObject(st.CompletedClientToolCalls)
	if err != nil {
		return nil, err
	}
	ownership, err := encodeOwnership(st.SessionID, st.ClientToolCallOwnership, st.PendingClientToolCalls, false)
	if err != nil {
		return nil, err
	}
	metadata, err := jsonObject(st.Metadata)
	if err != nil {
		return nil, err
	}
	tracing, err := jsonOrNil(st.TracingContext)
	if err != nil {
		return nil, err
	}
	return []any{
		st.SessionID, string(st.Status), st.StepCount, []byte(custom), rawOrNil(st.Output),
		nullIfEmpty(st.Error), nullIfEmpty(st.FailureReason), ic, pending,
		awaiting, nullIfEmpty(st.SuspendedStepID), completed,
		ownership, nullIfEmpty(string(st.Mode)), nullIfEmpty(st.UserID),
		st.Tags, metadata, tracing, timeOrNil(st.ExpiresAt), rawOrNil(st.SuspendedStep),
	}, nil
}

// SaveState implements store.Sessions.
func (s *Store) SaveState(ctx context.Context, state *store.SessionState, expectedVersion int64) (*store.SessionState, error) {
	args, err := mutableArgs(state)
	if err != nil {
		return nil, fmt.Errorf("store: save state: %w", err)
	}
	args = append(args, expectedVersion)
	st, err := scanSession(s.q.QueryRow(ctx, `UPDATE helix.sessions SET `+mutableSet+`
		WHERE session_id = $1 AND ($21::bigint = 0 OR version = $21)
		RETURNING `+sessionColumns, args...))
	if isNoRows(err) {
		err = s.staleOrMissing(ctx, state.SessionID, expectedVersion)
	}
	if err != nil {
		return nil, wrap(err, "save state %s", state.SessionID)
	}
	return st, nil
}

// staleOrMissing explains why a versioned update matched no row.
func (s *Store) staleOrMissing(ctx context.Context, sessionID string, expected int64) error {
	var actual int64
	err := s.q.QueryRow(ctx, `SELECT version FROM helix.sessions WHERE session_id = $1`, sessionID).Scan(&actual)
	if isNoRows(err) {
		return notFound("session", sessionID)
	}
	if err != nil {
		return err
	}
	return &helix.StaleStateError{SessionID: sessionID, ExpectedVersion: expected, ActualVersion: actual}
}

func statusArgs(u *store.StatusUpdate) (keep bool, ic, output []byte, errMsg, reason any, err error) {
	if u == nil {
		return true, nil, nil, nil, nil, nil
	}
	ic, err = jsonOrNil(u.InterruptContext)
	if err != nil {
		return
	}
	if len(u.Output) > 0 && !json.Valid(u.Output) {
		err = errors.New("output is not valid JSON")
		return
	}
	return false, ic, rawOrNil(u.Output), nullIfEmpty(u.Error), nullIfEmpty(u.FailureReason), nil
}

// statusSet assigns status ($2) and, unless $3 (keep) is true, the optional
// fields $4..$7.
const statusSet = `status = $2,
	interrupt_context = CASE WHEN $3 THEN interrupt_context ELSE $4 END,
	output = CASE WHEN $3 THEN output ELSE $5 END,
	error = CASE WHEN $3 THEN error ELSE $6 END,
	failure_reason = CASE WHEN $3 THEN failure_reason ELSE $7 END,
	version = version + 1, updated_at = now()`

// UpdateStatus implements store.Sessions. A non-nil u replaces the interrupt
// context, output, error and failure reason (zero values clear them).
func (s *Store) UpdateStatus(ctx context.Context, sessionID string, status helix.SessionStatus, u *store.StatusUpdate) error {
	if !status.Valid() {
		return fmt.Errorf("store: update status of %s: unknown status %q", sessionID, status)
	}
	keep, ic, output, errMsg, reason, err := statusArgs(u)
	if err != nil {
		return fmt.Errorf("store: update status of %s: %w", sessionID, err)
	}
	n, err := s.q.Exec(ctx, `UPDATE helix.sessions SET `+statusSet+` WHERE session_id = $1`,
		sessionID, string(status), keep, ic, output, errMsg, reason)
	if err == nil && n == 0 {
		err = notFound("session", sessionID)
	}
	return wrap(err, "update status of %s", sessionID)
}

// CompareAndSetStatus implements store.Sessions.
func (s *Store) CompareAndSetStatus(ctx context.Context, sessionID string, expected []helix.SessionStatus, newStatus helix.SessionStatus, opts *store.CASOptions) (store.CASResult, error) {
	if !newStatus.Valid() {
		return store.CASResult{}, fmt.Errorf("store: compare and set status of %s: unknown status %q", sessionID, newStatus)
	}
	if len(expected) == 0 {
		return store.CASResult{}, fmt.Errorf("store: compare and set status of %s: no expected statuses given", sessionID)
	}
	exp := make([]string, len(expected))
	for i, e := range expected {
		exp[i] = string(e)
	}
	var u *store.StatusUpdate
	var expectedVersion int64
	if opts != nil {
		expectedVersion, u = opts.ExpectedVersion, opts.Update
	}
	keep, ic, output, errMsg, reason, err := statusArgs(u)
	if err != nil {
		return store.CASResult{}, fmt.Errorf("store: compare and set status of %s: %w", sessionID, err)
	}
	var res store.CASResult
	err = s.q.QueryRow(ctx, `UPDATE helix.sessions SET `+statusSet+`
		WHERE session_id = $1 AND status = ANY($8) AND ($9::bigint = 0 OR version = $9)
		RETURNING version`,
		sessionID, string(newStatus), keep, ic, output, errMsg, reason, exp, expectedVersion).Scan(&res.NewVersion)
	if err == nil {
		res.OK, res.CurrentStatus, res.CurrentVersion = true, newStatus, res.NewVersion
		return res, nil
	}
	if !isNoRows(err) {
		return res, wrap(err, "compare and set status of %s", sessionID)
	}
	var cur string
	err = s.q.QueryRow(ctx, `SELECT status, version FROM helix.sessions WHERE session_id = $1`, sessionID).
		Scan(&cur, &res.CurrentVersion)
	if isNoRows(err) {
		err = notFound("session", sessionID)
	}
	res.CurrentStatus = helix.SessionStatus(cur)
	return res, wrap(err, "compare and set status of %s", sessionID)
}

// SaveStateAndPromoteStaging implements store.Sessions.
func (s *Store) SaveStateAndPromoteStaging(ctx context.Context, p store.CommitParams) (*store.CommitResult, error) {
	if p.State == nil {
		return nil, errors.New("store: commit: state is nil")
	}
	id := p.State.SessionID
	args, err := mutableArgs(p.State)
	if err != nil {
		return nil, fmt.Errorf("store: commit %s: %w", id, err)
	}
	msgs, err := encodeMessages(p.AppendMessages)
	if err != nil {
		return nil, fmt.Errorf("store: commit %s: %w", id, err)
	}
	var res store.CommitResult
	err = s.tx(ctx, func(q Querier) error {
		var version int64
		var count int
		err := q.QueryRow(ctx, `SELECT version, message_count FROM helix.sessions WHERE session_id = $1 FOR UPDATE`, id).
			Scan(&version, &count)
		if isNoRows(err) {
			return notFound("session", id)
		}
		if err != nil {
			return err
		}
		if p.ExpectedVersion != 0 && version != p.ExpectedVersion {
			return &helix.StaleStateError{SessionID: id, ExpectedVersion: p.ExpectedVersion, ActualVersion: version}
		}
		if len(msgs) > 0 {
			// Pending model records at the messages' places move away
			// first (the session's row is locked).
			if _, err := q.Exec(ctx, insertMessagesSQL, id, count, msgs); err != nil {
				return fmt.Errorf("append messages: %w", err)
			}
			count += len(msgs)
		}
		custom := args[3].([]byte)
		if p.PromoteStepID != "" {
			promoted, warnings, err := promote(ctx, q, id, p.PromoteStepID, custom)
			if err != nil {
				return err
			}
			custom, res.Warnings = promoted, warnings
		}
		args[3] = custom
		var cpID, cpSource any
		if p.Checkpoint != nil {
			cpID = cmp.Or(p.Checkpoint.ID, helix.GenerateCheckpointID(id, p.Checkpoint.StepCount))
			cpSource = cmp.Or(p.Checkpoint.Source, "staging")
		}
		res.State, err = scanSession(q.QueryRow(ctx, `UPDATE helix.sessions SET `+mutableSet+`,
			message_count = $21,
			checkpoint_id = COALESCE($22, checkpoint_id),
			checkpointed_at = CASE WHEN $22::text IS NULL THEN checkpointed_at ELSE now() END,
			checkpoint_source = COALESCE($23, checkpoint_source)
			WHERE session_id = $1 RETURNING `+sessionColumns, append(args, count, cpID, cpSource)...))
		if err != nil {
			return err
		}
		if p.Checkpoint != nil {
			cp, err := insertCheckpoint(ctx, q, res.State, cpID.(string), *p.Checkpoint)
			if err != nil {
				return err
			}
			res.CheckpointID = cp.ID
		}
		return nil
	})
	if err != nil {
		return nil, wrap(err, "commit %s", id)
	}
	return &res, nil
}

// IncrementStepCount implements store.Sessions.
func (s *Store) IncrementStepCount(ctx context.Context, sessionID string) (int, error) {
	return s.increment(ctx, sessionID, "step_count")
}

// IncrementResumeCount implements store.Sessions.
func (s *Store) IncrementResumeCount(ctx context.Context, sessionID string) (int, error) {
	return s.increment(ctx, sessionID, "resume_count")
}

func (s *Store) increment(ctx context.Context, sessionID, column string) (int, error) {
	var n int
	err := s.q.QueryRow(ctx, `UPDATE helix.sessions SET `+column+` = `+column+` + 1, version = version + 1,
		updated_at = now() WHERE session_id = $1 RETURNING `+column, sessionID).Scan(&n)
	if isNoRows(err) {
		err = notFound("session", sessionID)
	}
	return n, wrap(err, "increment %s of %s", column, sessionID)
}

// PatchMetadata implements store.Sessions.
func (s *Store) PatchMetadata(ctx context.Context, sessionID string, patch map[string]*string) (map[string]string, error) {
	set := map[string]string{}
	var del []string
	for k, v := range patch {
		if v == nil {
			del = append(del, k)
		} else {
			set[k] = *v
		}
	}
	setJSON, err := json.Marshal(set)
	if err != nil {
		return nil, fmt.Errorf("store: patch metadata of %s: %w", sessionID, err)
	}
	var raw []byte
	err = s.q.QueryRow(ctx, `UPDATE helix.sessions SET metadata = (metadata || $2::jsonb) - COALESCE($3::text[], '{}'),
		version = version + 1, updated_at = now() WHERE session_id = $1 RETURNING metadata`,
		sessionID, setJSON, del).Scan(&raw)
	if isNoRows(err) {
		err = notFound("session", sessionID)
	}
	if err != nil {
		return nil, wrap(err, "patch metadata of %s", sessionID)
	}
	out := map[string]string{}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("store: patch metadata of %s: decode: %w", sessionID, err)
	}
	return out, nil
}

// CloneSession implements store.Sessions.
func (s *Store) CloneSession(ctx context.Context, p store.CloneParams) (*store.SessionState, error) {
	if err := validateID("session", p.ToSessionID); err != nil {
		return nil, fmt.Errorf("store: clone session: %w", err)
	}
	var created *store.SessionState
	err := s.tx(ctx, func(q Querier) error {
		src, err := s.loadState(ctx, q, p.FromSessionID, false)
		if err != nil {
			return err
		}
		messageCount, custom := src.MessageCount, src.CustomState
		cpID := p.CheckpointID
		if cpID == "" {
			cpID = src.CheckpointID
		}
		if cpID != "" {
			cp, err := getCheckpoint(ctx, q, cpID)
			if err != nil {
				return err
			}
			if cp.SessionID != src.SessionID {
				return fmt.Errorf("checkpoint %s belongs to session %s, not %s", cpID, cp.SessionID, src.SessionID)
			}
			messageCount, custom = cp.MessageCount, cp.CustomState
		}
		metadata, err := jsonObject(src.Metadata)
		if err != nil {
			return err
		}
		st, err := scanSession(q.QueryRow(ctx, `INSERT INTO helix.sessions
			(session_id, agent_type, stream_id, root_session_id, custom_state, message_count, user_id, tags, metadata)
			VALUES ($1, $2, $1, $1, $3, $4, $5, COALESCE($6::text[], '{}'), $7)
			ON CONFLICT (session_id) DO NOTHING RETURNING `+sessionColumns,
			p.ToSessionID, cmp.Or(p.AgentType, src.AgentType), []byte(custom), messageCount,
			nullIfEmpty(src.UserID), src.Tags, metadata))
		if isNoRows(err) {
			return &helix.SessionExistsError{SessionID: p.ToSessionID}
		}
		if err != nil {
			return err
		}
		if _, err := q.Exec(ctx, `WITH d AS (SELECT key FROM helix.sessions WHERE session_id = $1),
				m AS (SELECT x.seq, x.message FROM helix.sessions s, LATERAL `+sessionMessagesSQL("s", "seq < $3", "")+` x
					WHERE s.session_id = $2)
			INSERT INTO helix.messages (session_key, seq, message) SELECT d.key, m.seq, m.message FROM m, d`,
			p.ToSessionID, src.SessionID, messageCount); err != nil {
			return fmt.Errorf("copy messages: %w", err)
		}
		if _, err := q.Exec(ctx, `INSERT INTO helix.streams (stream_id, owner_session_id) VALUES ($1, $1)
			ON CONFLICT (stream_id) DO NOTHING`, p.ToSessionID); err != nil {
			return fmt.Errorf("register stream: %w", err)
		}
		created = st
		return nil
	})
	if err != nil {
		return nil, wrap(err, "clone session %s into %s", p.FromSessionID, p.ToSessionID)
	}
	return created, nil
}

// deleteSubtreeSQL lists the session $1 and its descendants.
const deleteSubtreeSQL = `WITH RECURSIVE tree AS (
		SELECT session_id FROM helix.sessions WHERE session_id = $1
		UNION
		SELECT c.session_id FROM helix.sessions c JOIN tree t ON c.parent_session_id = t.session_id
	)
	SELECT session_id FROM tree`

// DeleteSession implements store.Sessions. A sub-session's steps are in an
// ancestor's stream, which stays: the marker rows there that render from
// the deleted sessions' checkpoints and messages (format 4) are rewritten
// as the rows they stand for first, in the same transaction, so that
// stream still reads whole.
func (s *Store) DeleteSession(ctx context.Context, sessionID string) error {
	err := s.tx(ctx, func(q Querier) error {
		var parent *string
		if err := q.QueryRow(ctx, `SELECT parent_session_id FROM helix.sessions WHERE session_id = $1 FOR UPDATE`, sessionID).
			Scan(&parent); err != nil {
			if isNoRows(err) {
				return notFound("session", sessionID)
			}
			return err
		}
		rows, err := q.Query(ctx, deleteSubtreeSQL, sessionID)
		if err != nil {
			return err
		}
		tree, err := collectStrings(rows)
		if err != nil {
			return err
		}
		if parent != nil {
			for _, id := range tree {
				if err := literalMarkers(ctx, q, id, 0); err != nil {
					return err
				}
			}
		}
		_, err = q.Exec(ctx, `DELETE FROM helix.sessions WHERE session_id = ANY($1)`, tree)
		return err
	})
	return wrap(err, "delete session %s", sessionID)
}

// ListSessions implements store.Sessions.
func (s *Store) ListSessions(ctx context.Context, opts store.ListSessionsOptions) ([]store.SessionSummary, error) {
	limit := pageLimit(opts.Limit, store.DefaultMessagePageSize)
	rows, err := s.q.Query(ctx, `SELECT `+summaryColumns+`
		FROM helix.sessions s
		WHERE ($1 = '' OR status = $1) AND ($2 = '' OR agent_type = $2) AND ($3 = '' OR user_id = $3)
		  AND (NOT $4 OR parent_session_id IS NULL)
		ORDER BY created_at DESC, session_id
		LIMIT $5 OFFSET $6`,
		string(opts.Status), opts.AgentType, opts.UserID, opts.RootsOnly, limit, max(opts.Offset, 0))
	if err != nil {
		return nil, wrap(err, "list sessions")
	}
	out, err := collectSummaries(rows, nil)
	return out, wrap(err, "list sessions")
}

// summaryColumns are the columns of a store.SessionSummary (table alias
// s), in the order collectSummaries reads them.
const summaryColumns = `s.session_id, s.agent_type, coalesce(s.parent_session_id, ''), s.status, s.step_count,
	s.message_count, coalesce(s.user_id, ''), s.created_at, GREATEST(s.updated_at, s.checkpointed_at)`

// collectSummaries appends the rows of summaryColumns to out and closes
// rows.
func collectSummaries(rows Rows, out []store.SessionSummary) ([]store.SessionSummary, error) {
	defer rows.Close()
	for rows.Next() {
		var r store.SessionSummary
		var status string
		if err := rows.Scan(&r.SessionID, &r.AgentType, &r.ParentSessionID, &status, &r.StepCount,
			&r.MessageCount, &r.UserID, &r.CreatedAt, &r.UpdatedAt); err != nil {
			return nil, err
		}
		r.Status = helix.SessionStatus(status)
		out = append(out, r)
	}
	return out, rows.Err()
}

func pageLimit(limit, def int) int {
	if limit <= 0 {
		return def
	}
	return min(limit, store.MaxPageSize)
}

// wrap prefixes a store error with the operation; typed helix errors stay
// matchable with errors.As.
func wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("store: "+format+": %w", append(args, err)...)
}

// missingSession turns a foreign-key violation on a session reference into a
// *helix.NotFoundError for that session.
func missingSession(err error, sessionID string) error {
	if pgCode(err) == codeForeignKeyViolation {
		return notFound("session", sessionID)
	}
	return err
}
