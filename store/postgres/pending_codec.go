package postgres

import (
	"encoding/json"
	"fmt"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// A session's pending calls (helix.sessions.pending_client_tool_calls, an
// object keyed by tool call ID) are stored without what the row and the
// call imply, and read back whole: a call's toolCallId is its key, its
// ownerSessionId the row's session, and an approval's approvalId is
// ApprovalID(runId, toolCallId). A value that differs from what is implied
// (or a row written before this encoding) is stored as it is, so every
// call reads back as it was written. SQL that reads the column takes the
// call's ID from the key (jsonb_each's key), never from the value.

// ApprovalID is the approval ID of an approval-gated call toolCallID of
// run runID, as steps.SuspendStep makes it.
func ApprovalID(runID, toolCallID string) string { return runID + "::" + toolCallID }

// storedCall is a pending call as stored: its implied fields are nil when
// they hold the implied value (they shadow the embedded call's).
type storedCall struct {
	store.PendingClientToolCall
	ToolCallID     *string `json:"toolCallId,omitempty"`
	ApprovalID     *string `json:"approvalId,omitempty"`
	OwnerSessionID *string `json:"ownerSessionId,omitempty"`
}

// callImplies returns what c's row (session sessionID) and key imply of it.
func callImplies(sessionID, key string, c store.PendingClientToolCall) (toolCallID, approvalID, owner string) {
	if c.Kind == helix.SubmissionApprovalResponse {
		approvalID = ApprovalID(c.RunID, key)
	}
	return key, approvalID, sessionID
}

// unlessImplied returns nil when v is the implied value, else &v.
func unlessImplied(v, implied string) *string {
	if v == implied {
		return nil
	}
	return &v
}

// encodePending returns the stored JSON of session sessionID's pending
// calls ("{}" for none).
func encodePending(sessionID string, pending map[string]store.PendingClientToolCall) ([]byte, error) {
	out := make(map[string]storedCall, len(pending))
	for key, c := range pending {
		id, approval, owner := callImplies(sessionID, key, c)
		out[key] = storedCall{PendingClientToolCall: c, ToolCallID: unlessImplied(c.ToolCallID, id),
			ApprovalID: unlessImplied(c.ApprovalID, approval), OwnerSessionID: unlessImplied(c.OwnerSessionID, owner)}
	}
	return json.Marshal(out)
}

// decodePendingCall decodes the stored call key of session sessionID's
// pending calls (encodePending).
func decodePendingCall(sessionID, key string, raw []byte) (store.PendingClientToolCall, error) {
	var s storedCall
	if err := json.Unmarshal(raw, &s); err != nil {
		return store.PendingClientToolCall{}, fmt.Errorf("decode pending call %s of session %s: %w", key, sessionID, err)
	}
	c := s.PendingClientToolCall
	id, approval, owner := callImplies(sessionID, key, c)
	c.ToolCallID, c.ApprovalID, c.OwnerSessionID = orImplied(s.ToolCallID, id), orImplied(s.ApprovalID, approval), orImplied(s.OwnerSessionID, owner)
	return c, nil
}

func orImplied(v *string, implied string) string {
	if v == nil {
		return implied
	}
	return *v
}

// decodePending decodes session sessionID's stored pending calls (nil for
// none).
func decodePending(sessionID string, raw []byte) (map[string]store.PendingClientToolCall, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var stored map[string]json.RawMessage
	if err := json.Unmarshal(raw, &stored); err != nil {
		return nil, fmt.Errorf("decode pending calls of session %s: %w", sessionID, err)
	}
	out := make(map[string]store.PendingClientToolCall, len(stored))
	for key, b := range stored {
		c, err := decodePendingCall(sessionID, key, b)
		if err != nil {
			return nil, err
		}
		out[key] = c
	}
	return out, nil
}
