package helix_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
)

// Submissions decode from the specification's wire shape and are checked
// before anything is looked up.
func TestToolSubmissionWireShapeAndValidation(t *testing.T) {
	t.Parallel()
	var s helix.ToolSubmission
	require.NoError(t, json.Unmarshal([]byte(`{"kind":"approval-response","toolCallId":"t1","approved":false,"reason":"no"}`), &s))
	require.NoError(t, s.Validate())
	require.False(t, s.IsApproved())
	require.Equal(t, helix.Deny("t1", "no"), s)

	ok, err := helix.ClientToolResult("c1", map[string]int{"n": 1})
	require.NoError(t, err)
	b, err := json.Marshal(ok)
	require.NoError(t, err)
	require.JSONEq(t, `{"kind":"client-tool-result","toolCallId":"c1","result":{"n":1}}`, string(b))
	require.NoError(t, helix.ClientToolError("c1", "the user closed the dialog").Validate())
	require.True(t, helix.Approve("t1", "").IsApproved())

	bad := map[string]helix.ToolSubmission{
		"no id":             {Kind: helix.SubmissionClientToolResult, Result: json.RawMessage(`1`)},
		"unknown kind":      {Kind: "vote", ToolCallID: "x"},
		"result and error":  {Kind: helix.SubmissionClientToolResult, ToolCallID: "x", Result: json.RawMessage(`1`), Error: "e"},
		"neither":           {Kind: helix.SubmissionClientToolResult, ToolCallID: "x"},
		"invalid JSON":      {Kind: helix.SubmissionClientToolResult, ToolCallID: "x", Result: json.RawMessage(`{`)},
		"approval, no bool": {Kind: helix.SubmissionApprovalResponse, ToolCallID: "x"},
		"approval + result": {Kind: helix.SubmissionApprovalResponse, ToolCallID: "x", Approved: new(bool), Result: json.RawMessage(`1`)},
	}
	for name, s := range bad {
		err := s.Validate()
		var se *helix.SubmissionError
		require.True(t, errors.As(err, &se), name)
		require.Equal(t, helix.SubmissionInvalid, se.Code, name)
		require.ErrorIs(t, err, helix.ErrSubmissionRejected, name)
	}
	unknown := &helix.SubmissionError{Code: helix.SubmissionUnknownToolCall, ToolCallID: "x"}
	require.ErrorIs(t, unknown, helix.ErrNotFound)
}
