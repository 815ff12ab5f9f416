package helix_test

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
)

// gobRoundTrip encodes err as an error interface value, as DBOS does when it
// checkpoints a workflow's error, and decodes it back.
func gobRoundTrip(t *testing.T, err error) error {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, gob.NewEncoder(&buf).Encode(&err))
	var back error
	require.NoError(t, gob.NewDecoder(&buf).Decode(&back))
	return back
}

func TestErrorsMatchAfterGob(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err      error
		sentinel error
		check    func(t *testing.T, err error)
	}{
		{&helix.AgentAlreadyRunningError{SessionID: "s", CurrentStatus: "active"}, nil, func(t *testing.T, err error) {
			var e *helix.AgentAlreadyRunningError
			require.ErrorAs(t, err, &e)
			require.Equal(t, "s", e.SessionID)
		}},
		{&helix.AgentNotResumableError{SessionID: "s", CurrentStatus: "completed", Reason: "nothing to resume"}, nil, func(t *testing.T, err error) {
			var e *helix.AgentNotResumableError
			require.ErrorAs(t, err, &e)
			require.Equal(t, "nothing to resume", e.Reason)
		}},
		{&helix.StaleStateError{SessionID: "s", ExpectedVersion: 3, ActualVersion: 4}, nil, func(t *testing.T, err error) {
			var e *helix.StaleStateError
			require.ErrorAs(t, err, &e)
			require.Equal(t, int64(4), e.ActualVersion)
		}},
		{&helix.ExecutorSupersededError{SessionID: "s"}, nil, func(t *testing.T, err error) {
			var e *helix.ExecutorSupersededError
			require.ErrorAs(t, err, &e)
		}},
		{&helix.FencingTokenMismatchError{SessionID: "s", ExpectedToken: 2, ActualToken: 1}, nil, func(t *testing.T, err error) {
			var e *helix.FencingTokenMismatchError
			require.ErrorAs(t, err, &e)
		}},
		{&helix.NotFoundError{Kind: "session", ID: "s"}, helix.ErrNotFound, nil},
		{&helix.SessionExistsError{SessionID: "s"}, helix.ErrSessionExists, nil},
		{&helix.ValidationError{Subject: "x", Violations: []helix.Violation{{Pointer: "/a", Message: "bad"}}}, helix.ErrInvalidInput, nil},
		{&helix.DefinitionError{Kind: "tool", Name: "t", Field: "name", Reason: "bad"}, helix.ErrInvalidDefinition, nil},
		{&helix.StreamTruncatedError{StreamID: "s", TruncatedAtStep: 2, AtSequence: 9}, helix.ErrStreamTruncated, nil},
		{&helix.StreamFailedError{StreamID: "s", Message: "m"}, helix.ErrStreamFailed, nil},
		{&helix.StreamNotActiveError{StreamID: "s", Status: helix.StreamEnded}, helix.ErrStreamNotActive, nil},
		{&helix.ModelError{Code: helix.CodeProviderRateLimited, Message: "slow down", Recoverable: true, StatusCode: 429}, nil, func(t *testing.T, err error) {
			var e *helix.ModelError
			require.ErrorAs(t, err, &e)
			require.True(t, e.Recoverable)
			require.Contains(t, e.Error(), "HTTP 429")
		}},
		{&helix.ToolPanicError{Tool: "t", Where: "tool", Value: "boom"}, nil, func(t *testing.T, err error) {
			var e *helix.ToolPanicError
			require.ErrorAs(t, err, &e)
		}},
		{&helix.SessionRunningError{SessionID: "s", RunningSessionID: "s-sub-c1", Status: "PENDING", WorkflowID: "s-sub-c1-turn-1"},
			helix.ErrSessionRunning, nil},
		{&helix.NotRootSessionError{SessionID: "s-sub-c1", RootSessionID: "s"}, helix.ErrNotRootSession, nil},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%T", c.err), func(t *testing.T) {
			t.Parallel()
			back := gobRoundTrip(t, c.err)
			require.Equal(t, c.err.Error(), back.Error())
			wrapped := fmt.Errorf("engine: execute: %w", back)
			if c.sentinel != nil {
				require.ErrorIs(t, back, c.sentinel)
				require.ErrorIs(t, wrapped, c.sentinel)
			}
			if c.check != nil {
				c.check(t, back)
				c.check(t, wrapped)
			}
		})
	}
}

func TestErrorMessagesSayWhatToDo(t *testing.T) {
	t.Parallel()
	require.Contains(t, (&helix.AgentAlreadyRunningError{SessionID: "s", CurrentStatus: "active"}).Error(), "interrupt")
	require.Contains(t, (&helix.StaleStateError{SessionID: "s"}).Error(), "reload")
	require.Contains(t, (&helix.StreamTruncatedError{StreamID: "s"}).Error(), "reload state")
	require.Contains(t, (&helix.StreamNotActiveError{StreamID: "s"}).Error(), "reactivate")
	ve := &helix.ValidationError{Subject: `arguments of tool "t"`, Violations: []helix.Violation{{Pointer: "", Message: "missing property 'q'"}, {Pointer: "/n", Message: "want integer"}}}
	require.Equal(t, "invalid arguments of tool \"t\":\n- at /: missing property 'q'\n- at /n: want integer", ve.Error())
	require.False(t, errors.Is(&helix.NotFoundError{}, helix.ErrSessionExists))
}
