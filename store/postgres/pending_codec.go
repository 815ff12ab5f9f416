package postgres

import (
	"encoding/json"
	"fmt"
	"strings"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// A session's pending calls (helix.sessions.pending_client_tool_calls, an
// object keyed by tool call ID) are stored without what the row and the
// call imply, and read back whole: a call's toolCallId is its key, its
// ownerSessionId the row's session, its runId and step those the row's
// suspended_step_id names ("{runId}:{step}", steps.StepID), and an
// approval's approvalId is ApprovalID(runId, toolCallId). A value that
// differs from what is implied is stored as it is (a run and a step
// together), so every call reads back as it was written. An index of 0 is
// left out. SQL that reads the column takes the call's ID from the key
// (jsonb_each's key), never from the value, an absent index as 0, and its
// run and step through helix.pending_call; a statement that changes
// suspended_step_id writes the pending calls again (encodePending with the
// new ID, or helix.pending_restated).

// ApprovalID is the approval ID of an approval-gated call toolCallID of
// run runID, as steps.SuspendStep makes it.
func ApprovalID(runID, toolCallID string) string { return runID + "::" + toolCallID }

// storedCall is a pending call as stored: its implied fields are nil when
// they hold the implied value, and its index is left out when 0, the first
// call of its step (they shadow the embedded call's).
type storedCall struct {
	store.PendingClientToolCall
	ToolCallID     *string `json:"toolCallId,omitempty"`
	ApprovalID     *string `json:"approvalId,omitempty"`
	OwnerSessionID *string `json:"ownerSessionId,omitempty"`
	RunID          *string `json:"runId,omitempty"`
	Step           *int    `json:"step,omitempty"`
	Index          int     `json:"index,omitempty"`
}

// SplitStepID returns the run and the step a suspended step ID
// ("{runId}:{step}", as steps.StepID renders it, the step 1 to 9 digits)
// names; ok is false for an ID of another form. SQL reads it the same way
// (helix.step_id_parts), and so does the engine's suspended step record.
func SplitStepID(stepID string) (runID string, step int, ok bool) {
	i := strings.LastIndexByte(stepID, ':')
	digits := stepID[i+1:]
	if i < 1 || len(digits) == 0 || len(digits) > 9 {
		return "", 0, false
	}
	for _, d := range []byte(digits) {
		if d < '0' || d > '9' {
			return "", 0, false
		}
		step = step*10 + int(d-'0')
	}
	return stepID[:i], step, true
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
// calls ("{}" for none), next to the suspended step ID stepID its row
// keeps.
func encodePending(sessionID, stepID string, pending map[string]store.PendingClientToolCall) ([]byte, error) {
	run, step, named := SplitStepID(stepID)
	out := make(map[string]storedCall, len(pending))
	for key, c := range pending {
		id, approval, owner := callImplies(sessionID, key, c)
		sc := storedCall{PendingClientToolCall: c, ToolCallID: unlessImplied(c.ToolCallID, id),
			ApprovalID: unlessImplied(c.ApprovalID, approval), OwnerSessionID: unlessImplied(c.OwnerSessionID, owner), Index: c.Index}
		if !named || c.RunID != run || c.Step != step {
			sc.RunID, sc.Step = &c.RunID, &c.Step
		}
		out[key] = sc
	}
	return json.Marshal(out)
}

// decodePendingCall decodes the stored call key of session sessionID's
// pending calls (encodePending), its row's suspended step ID stepID ("" for
// a call whose run and step are spelled out, as helix.pending_call
// returns it).
func decodePendingCall(sessionID, stepID, key string, raw []byte) (store.PendingClientToolCall, error) {
	var s storedCall
	if err := json.Unmarshal(raw, &s); err != nil {
		return store.PendingClientToolCall{}, fmt.Errorf("decode pending call %s of session %s: %w", key, sessionID, err)
	}
	c := s.PendingClientToolCall
	c.Index = s.Index
	if s.RunID != nil {
		c.RunID = *s.RunID
		if s.Step != nil {
			c.Step = *s.Step
		}
	} else if run, step, named := SplitStepID(stepID); named {
		c.RunID, c.Step = run, step
	} else if s.Step != nil {
		c.Step = *s.Step // a call of no run (JSON written whole)
	}
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
// none), its row's suspended step ID stepID.
func decodePending(sessionID, stepID string, raw []byte) (map[string]store.PendingClientToolCall, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var stored map[string]json.RawMessage
	if err := json.Unmarshal(raw, &stored); err != nil {
		return nil, fmt.Errorf("decode pending calls of session %s: %w", sessionID, err)
	}
	out := make(map[string]store.PendingClientToolCall, len(stored))
	for key, b := range stored {
		c, err := decodePendingCall(sessionID, stepID, key, b)
		if err != nil {
			return nil, err
		}
		out[key] = c
	}
	return out, nil
}

// A root session's ownership map (helix.sessions.client_tool_call_ownership,
// a call ID -> the session the call waits in) is stored without the
// entries its own pending calls imply: a call pending in a root's row is
// the root's unless the map says otherwise (a pending call the map does not
// list is stored as null), so every map reads back as it was written. A
// sub-agent's row (whose pending calls its root's map names; its own map is
// written only whole) implies nothing. SQL that reads an owner takes the
// root for a call pending in the root's row that its map does not name
// (helix.submit_answer).

// encodeOwnership returns the stored JSON of session sessionID's ownership
// map own, its row keeping the pending calls pending ("{}" for none).
// implied leaves out the entries a root's row implies: the caller knows
// the row is a root's. Without it the entries are all written, with a null
// for each pending call the map does not list: right for a row of either
// kind.
func encodeOwnership(sessionID string, own map[string]string, pending map[string]store.PendingClientToolCall, implied bool) ([]byte, error) {
	out := make(map[string]*string, len(own))
	for id, owner := range own {
		if _, ok := pending[id]; ok && implied && owner == sessionID {
			continue
		}
		out[id] = &owner
	}
	for id := range pending {
		if _, ok := own[id]; !ok {
			out[id] = nil
		}
	}
	return json.Marshal(out)
}

// decodeOwnership decodes session sessionID's stored ownership map
// (encodeOwnership), its row's pending calls decoded (nil for none); root
// says the row is a root session's.
func decodeOwnership(sessionID string, raw []byte, pending map[string]store.PendingClientToolCall, root bool) (map[string]string, error) {
	var stored map[string]*string
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &stored); err != nil {
			return nil, fmt.Errorf("decode the tool call ownership of session %s: %w", sessionID, err)
		}
	}
	var own map[string]string
	add := func(id, owner string) {
		if own == nil {
			own = make(map[string]string, len(stored)+len(pending))
		}
		own[id] = owner
	}
	for id, owner := range stored {
		if owner != nil {
			add(id, *owner)
		}
	}
	if root {
		for id := range pending {
			if _, ok := stored[id]; !ok {
				add(id, sessionID)
			}
		}
	}
	return own, nil
}
