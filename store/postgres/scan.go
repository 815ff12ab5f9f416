package postgres

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// sessionColumns is the column list scanSession reads, in order.
//
// A session's last change (its UpdatedAt, retention's last activity) is
// GREATEST(updated_at, checkpointed_at): a step commit (commitStepSQL)
// writes checkpointed_at = now() and leaves updated_at alone, every other
// update writes updated_at = now(). The step's update of its row is
// heap-only and its WAL record logs the row from the first to the last
// column it changes; updated_at is the row's last but one, and writing it
// at every step logged checkpoint_source, metadata, tags, user_id,
// tracing_context, expires_at and created_at again (about 45 bytes per
// step).
var sessionColumns = sessionColumnsWith("completed_client_tool_calls")

// sessionColumnsWith is sessionColumns with completed (an expression) read
// as the completed calls' map: the HITL writes read only the entries they
// look at (completedOnly).
func sessionColumnsWith(completed string) string {
	return `session_id, agent_type, stream_id, COALESCE(parent_session_id, ''), root_session_id,
	status, step_count, message_count, custom_state, output, COALESCE(error, ''), COALESCE(failure_reason, ''),
	interrupt_context, pending_client_tool_calls, suspended_awaiting_children, COALESCE(suspended_step_id, ''),
	suspended_step, ` + completed + `, client_tool_call_ownership, interrupt_requested, COALESCE(interrupt_reason, ''),
	COALESCE(mode, ''), version, resume_count, COALESCE(checkpoint_id, ''), checkpointed_at, COALESCE(checkpoint_source, ''),
	COALESCE(user_id, ''), tags, metadata, tracing_context, expires_at, created_at, GREATEST(updated_at, checkpointed_at)`
}

// completedOnly reads the entries of the completed calls' map whose IDs are
// in the text array at parameter n (NULL: none). The map holds every call
// a conversation ever resolved; reading and writing it whole made each
// answer of a human cost time and WAL in proportion to the answers before
// it.
func completedOnly(n int) string {
	p := "$" + strconv.Itoa(n)
	return `(SELECT jsonb_object_agg(k, completed_client_tool_calls -> k) FROM unnest(` + p + `::text[]) AS k
		WHERE completed_client_tool_calls ? k)`
}

func scanSession(row Row) (*store.SessionState, error) {
	var (
		s                                          store.SessionState
		status, mode                               string
		output, interruptCtx, pending, awaiting    []byte
		suspendedStep                              []byte
		completed, ownership, metadata, tracingCtx []byte
	)
	err := row.Scan(&s.SessionID, &s.AgentType, &s.StreamID, &s.ParentSessionID, &s.RootSessionID,
		&status, &s.StepCount, &s.MessageCount, &s.CustomState, &output, &s.Error, &s.FailureReason,
		&interruptCtx, &pending, &awaiting, &s.SuspendedStepID,
		&suspendedStep, &completed, &ownership, &s.InterruptRequested, &s.InterruptReason,
		&mode, &s.Version, &s.ResumeCount, &s.CheckpointID, &s.CheckpointedAt, &s.CheckpointSource,
		&s.UserID, &s.Tags, &metadata, &tracingCtx, &s.ExpiresAt, &s.CreatedAt, &s.UpdatedAt)
	if err != nil {
		return nil, err
	}
	s.Status = helix.SessionStatus(status)
	s.Mode = helix.SessionMode(mode)
	if len(output) > 0 {
		s.Output = output
	}
	if len(suspendedStep) > 0 {
		s.SuspendedStep = suspendedStep
	}
	if err := decodeJSON(
		jsonField{"interrupt_context", interruptCtx, &s.InterruptContext},
		jsonField{"suspended_awaiting_children", awaiting, &s.SuspendedAwaitingChildren},
		jsonField{"completed_client_tool_calls", completed, &s.CompletedClientToolCalls},
		jsonField{"metadata", metadata, &s.Metadata},
		jsonField{"tracing_context", tracingCtx, &s.TracingContext},
	); err != nil {
		return nil, fmt.Errorf("session %s: %w", s.SessionID, err)
	}
	if s.PendingClientToolCalls, err = decodePending(s.SessionID, s.SuspendedStepID, pending); err != nil {
		return nil, err
	}
	if s.ClientToolCallOwnership, err = decodeOwnership(s.SessionID, ownership, s.PendingClientToolCalls, s.IsRoot()); err != nil {
		return nil, err
	}
	if len(s.Tags) == 0 {
		s.Tags = nil
	}
	return &s, nil
}

type jsonField struct {
	name string
	data []byte
	into any
}

func decodeJSON(fields ...jsonField) error {
	for _, f := range fields {
		if len(f.data) == 0 || string(f.data) == "null" {
			continue
		}
		if err := json.Unmarshal(f.data, f.into); err != nil {
			return fmt.Errorf("decode %s: %w", f.name, err)
		}
	}
	return nil
}

// jsonOrNil marshals v, mapping nil pointers, nil maps and empty maps to
// SQL NULL-or-default via the returned nil.
func jsonOrNil(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if string(b) == "null" {
		return nil, nil
	}
	return b, nil
}

// jsonObject marshals a map, returning "{}" for nil so NOT NULL object
// columns stay objects.
func jsonObject(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if string(b) == "null" {
		return []byte("{}"), nil
	}
	return b, nil
}

func rawOrNil(r json.RawMessage) []byte {
	if len(r) == 0 {
		return nil
	}
	return r
}

func timeOrNil(t *time.Time) any {
	if t == nil || t.IsZero() {
		return nil
	}
	return *t
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func notFound(kind, id string) error { return &helix.NotFoundError{Kind: kind, ID: id} }

// isNoRows reports pgx's no-rows error.
func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// pgCode returns the SQLSTATE of a Postgres error, or "".
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// SQLSTATE codes the store maps.
const (
	codeForeignKeyViolation = "23503"
	codeUniqueViolation     = "23505"
	codeCheckViolation      = "23514"
)
