package steps_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store"
)

// DBOS checkpoints step inputs and outputs as JSON: every one must come back
// equal, or a replay would see something else than the first execution.
func TestStepValuesRoundTripThroughJSON(t *testing.T) {
	yes := true
	run := steps.RunInfo{SessionID: "s", RunID: "r", AgentType: "a", StreamID: "s", RootSessionID: "s", WorkflowID: "s-turn-1",
		Turn: 1, PreviousRunID: "p", StartSequence: 7, StartStep: 2, Resumed: true}
	call := helix.ToolCall{ID: "c1", Name: "ask", Arguments: json.RawMessage(`{"q":"?"}`)}
	result := steps.ToolResult{ToolCallID: "c1", ToolName: "ask", Result: json.RawMessage(`{"a":1}`), DurationMS: 3,
		Patches: []helix.PatchOp{{Op: "add", Path: "/x/-", Value: json.RawMessage(`1`)}}, Recorded: true, Denied: true, FinishWith: true}
	model := helix.StepResult{Type: helix.StepToolCalls, Content: "hi", ToolCalls: []helix.ToolCall{call}, StopReason: helix.StopToolUse,
		Usage: helix.Usage{InputTokens: 1, OutputTokens: 2}}
	pending := store.PendingClientToolCall{ToolCallID: "c1", ToolName: "ask", Kind: helix.SubmissionApprovalResponse,
		Arguments: json.RawMessage(`{"q":"?"}`), ApprovalID: "r::c1", OutputSchema: json.RawMessage(`{"type":"object"}`), Index: 1,
		OwnerSessionID: "s", RunID: "r", WorkflowID: "s-turn-1", Step: 2, CreatedAt: 10, DeadlineAt: 20,
		Submission:  &helix.ToolSubmission{Kind: helix.SubmissionApprovalResponse, ToolCallID: "c1", Approved: &yes, Reason: "ok"},
		SubmittedAt: 15, ConsumedAt: 16}
	rec := steps.SuspendedStep{RunID: "r", Step: 2, Model: model, Results: []steps.ToolResult{result, {}}}
	withSuspension := run
	withSuspension.Suspended, withSuspension.Pending = &rec, []store.PendingClientToolCall{pending}
	values := []any{
		withSuspension,
		steps.ModelInput{Run: run, Step: 2},
		steps.ModelOutput{Result: model, Failure: &steps.Failure{Message: "m", Code: "c", Recoverable: true}, DurationMS: 4},
		steps.ToolInput{Run: run, Step: 2, Call: call, Staged: result.Patches},
		result,
		steps.CommitInput{Run: run, Step: 2, Model: model, Tools: []steps.ToolResult{result}, Complete: true,
			Output: json.RawMessage(`{"o":1}`), Text: "t", Nudge: "n", StepRunID: "r0", Suspended: true},
		steps.CommitOutput{CheckpointID: "cp", MessageCount: 3, Interrupted: true},
		steps.ApprovalInput{Run: run, Step: 2, Calls: []helix.ToolCall{call}},
		steps.SuspendInput{Run: run, Record: rec, Pending: []steps.PendingCall{{Index: 1, Call: call, Kind: helix.SubmissionClientToolResult}}},
		steps.SuspendOutput{Pending: []store.PendingClientToolCall{pending}, Interrupted: true, Reason: "why"},
		steps.ResolveInput{Run: run, Step: 2, StepRunID: "r0", Call: pending, TimedOut: true},
		steps.ResolveOutput{Call: pending, Interrupted: true, Reason: "why"},
		steps.HooksInput{Run: run, Step: 2, Events: []steps.HookEvent{{Kind: steps.HookAgentSuspended,
			Suspension: &helix.Suspension{ToolCallIDs: []string{"c1"}}, PreviousRunID: "p"}}},
		steps.Outcome{Status: helix.RunCompleted, Output: json.RawMessage(`{"o":1}`), Text: "t", Steps: 2},
		steps.Outcome{Status: helix.RunSuspendedClientTool, Await: &steps.AwaitCall{ToolCallID: "c1", DeadlineAt: 20, Then: []string{"c2"}},
			Hibernated: true},
		steps.DriverWakeInput{RunID: "r", WorkflowID: "s-turn-1", ToolCallID: "c1", DeadlineAt: 20, Then: []string{"c2"}, StepID: 7, Wake: 2},
		steps.DriverWakeOutput{Received: []string{"c1", "c2"}, TimedOut: true, Hibernated: true},
	}
	for _, v := range values {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		back := reflect.New(reflect.TypeOf(v))
		require.NoError(t, json.Unmarshal(b, back.Interface()))
		require.Equal(t, v, back.Elem().Interface(), "%T", v)
	}
}
