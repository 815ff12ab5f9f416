package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/google/uuid"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// NameDispatchSubAgent is the step that creates a sub-agent's session.
const NameDispatchSubAgent = "helix.dispatch_subagent"

// Codes of failed sub-agent calls (tool_end.errorCode).
const (
	CodeSubAgentDispatchFailed = "subagent_dispatch_failed"
	CodeSubAgentFailed         = "subagent_failed"
)

// Metadata keys of a child session: where its parent delegated to it.
const (
	MetaParentToolCallID = "helix.parentToolCallId"
	MetaParentRunID      = "helix.parentRunId"
	MetaParentAgentType  = "helix.parentAgentType"
	MetaParentStep       = "helix.parentStep"
)

// SubSessionID is the deterministic session ID of the ephemeral sub-agent
// a tool call starts: {parentSessionId}-sub-{toolCallId}.
func SubSessionID(parentSessionID, toolCallID string) string {
	return parentSessionID + "-sub-" + toolCallID
}

// ParentLink is where a child session's parent delegated to it.
type ParentLink struct {
	SessionID  string `json:"sessionId"`
	RunID      string `json:"runId"`
	AgentType  string `json:"agentType"`
	ToolCallID string `json:"toolCallId"`
	Step       int    `json:"step"`
}

// parentLink reads a child session's parent link from its metadata (nil for
// a root session, or a child made by other means).
func parentLink(st *store.SessionState) *ParentLink {
	if st.ParentSessionID == "" || st.Metadata[MetaParentToolCallID] == "" {
		return nil
	}
	step, _ := strconv.Atoi(st.Metadata[MetaParentStep])
	return &ParentLink{SessionID: st.ParentSessionID, RunID: st.Metadata[MetaParentRunID],
		AgentType: st.Metadata[MetaParentAgentType], ToolCallID: st.Metadata[MetaParentToolCallID], Step: step}
}

// DispatchInput is one sub-agent call of a parent step.
type DispatchInput struct {
	Run  RunInfo        `json:"run"`
	Step int            `json:"step"`
	Call helix.ToolCall `json:"call"`
	// Trace is the child session's tracing context: the parent's trace,
	// with the call's span as parent. Never recorded (tracing changes no
	// step's input or output); nil stores none.
	Trace *store.TracingContext `json:"-"`
}

// DispatchOutput is the child a call dispatched, or the failure the model
// reads instead.
type DispatchOutput struct {
	SessionID  string      `json:"sessionId,omitempty"`
	RunID      string      `json:"runId,omitempty"`
	WorkflowID string      `json:"workflowId,omitempty"`
	Failure    *ToolResult `json:"failure,omitempty"`
}

// DispatchSubAgent returns the transaction that dispatches a sub-agent
// call: the child session ({parent}-sub-{toolCallId}, in the parent's
// stream, its parent link in its metadata), the parent's sub-session
// reference (ephemeral, running), the child's run record, its first message
// (the call's arguments, as JSON) and subagent_start in the parent's
// stream. The workflow then starts the child's run as a DBOS child
// workflow. A call that cannot be dispatched (an unregistered agent,
// invalid arguments) is a failure result for the model, logged as
// subagent.dispatch_failed; the step's other calls are unaffected.
func (e *Env) DispatchSubAgent(in DispatchInput) dbos.Txn[DispatchOutput] {
	return func(ctx context.Context, tx dbos.Tx) (DispatchOutput, error) {
		run, call := in.Run, in.Call
		fail := func(format string, args ...any) (DispatchOutput, error) {
			msg := fmt.Sprintf(format, args...)
			e.Log.Error().Ctx(ctx).Str("event", "subagent.dispatch_failed").Str("sessionId", run.SessionID).Str("runId", run.RunID).
				Str("toolCallId", call.ID).Str("tool", call.Name).Msg(msg)
			return DispatchOutput{Failure: &ToolResult{ToolCallID: call.ID, ToolName: call.Name, Error: msg,
				ErrorCode: CodeSubAgentDispatchFailed}}, nil
		}
		def, err := e.RunAgent(run)
		if err != nil {
			return fail("%v", err)
		}
		tool, ok := def.Tools[call.Name]
		if !ok || tool.SubAgent() == nil {
			return fail("%q is not a sub-agent tool of agent %q", call.Name, run.AgentType)
		}
		child := tool.SubAgent()
		if _, err := e.Agent(child.Name); err != nil {
			return fail("sub-agent %q cannot run: %v", child.Name, err)
		}
		args := argsOrEmpty(call.Arguments)
		if err := tool.ValidateArguments(args); err != nil {
			return fail("%v", err)
		}
		s := e.InTx(tx)
		out, err := dispatchChild(ctx, s, run, in.Step, call, child, args, in.Trace)
		var exists *helix.SessionExistsError
		if errors.As(err, &exists) {
			return fail("a sub-agent session for tool call %s already exists (tool call IDs must be unique in a session)", call.ID)
		}
		return out, err
	}
}

// dispatchChild writes a new child session and its first run.
func dispatchChild(ctx context.Context, s *postgres.Store, run RunInfo, step int, call helix.ToolCall, child *helix.Agent, args json.RawMessage,
	trace *store.TracingContext) (DispatchOutput, error) {
	childID := SubSessionID(run.SessionID, call.ID)
	if _, err := s.CreateSession(ctx, store.CreateSessionParams{
		SessionID: childID, AgentType: child.Name, ParentSessionID: run.SessionID, CustomState: child.InitialState,
		Mode: helix.SessionModeStandard, TracingContext: trace,
		Metadata: map[string]string{MetaParentToolCallID: call.ID, MetaParentRunID: run.RunID,
			MetaParentAgentType: run.AgentType, MetaParentStep: strconv.Itoa(step)},
	}); err != nil {
		return DispatchOutput{}, err
	}
	if err := s.AddSubSessionRefs(ctx, run.SessionID, []store.SubSessionRef{{SubSessionID: childID, AgentType: child.Name,
		ParentToolCallID: call.ID, Status: helix.SubSessionRunning, Mode: helix.SubSessionEphemeral}}); err != nil {
		return DispatchOutput{}, err
	}
	latest, err := s.LatestSequence(ctx, run.StreamID)
	if err != nil {
		return DispatchOutput{}, err
	}
	out := DispatchOutput{SessionID: childID, RunID: uuid.Must(uuid.NewV7()).String(), WorkflowID: childID + "-turn-1"}
	if _, err := s.CreateRun(ctx, store.CreateRunParams{RunID: out.RunID, SessionID: childID, Turn: 1,
		StartSequence: latest, WorkflowID: out.WorkflowID}); err != nil {
		return DispatchOutput{}, err
	}
	if _, err := s.AppendMessages(ctx, childID, []helix.Message{helix.UserMessage(string(args))}); err != nil {
		return DispatchOutput{}, err
	}
	_, err = s.Append(ctx, run.StreamID, []store.ChunkWrite{{RunID: run.RunID, Chunk: &helix.SubAgentStartChunk{
		Base: base(run, step), SubAgentType: child.Name, SubSessionID: childID, CallID: call.ID,
	}}})
	return out, err
}

// ChildResult turns the outcome of a sub-agent's run into the parent's
// tool result: the child's output, or its failure as {"error": …}.
func ChildResult(call helix.ToolCall, out Outcome, err error) ToolResult {
	r := ToolResult{ToolCallID: call.ID, ToolName: call.Name}
	switch {
	case err != nil:
		// The workflow's Go error is infrastructure text (SQL, DBOS): the
		// model and the stream get a plain account; the child's session
		// and the log have the cause.
		r.Error, r.ErrorCode = "the sub-agent's run ended abnormally (its session records the cause)", CodeSubAgentFailed
	case out.Status == helix.RunCompleted:
		r.Result = out.Output
	case out.Status == helix.RunInterrupted:
		r.Error, r.ErrorCode = "the sub-agent was interrupted: "+out.Error, CodeSubAgentFailed
	case out.Code == helix.CodeInternal:
		r.Error, r.ErrorCode = "the sub-agent failed with an internal error (its session records the cause)", CodeSubAgentFailed
	default:
		r.Error, r.ErrorCode = out.Error, CodeSubAgentFailed
		if r.Error == "" {
			r.Error = fmt.Sprintf("the sub-agent ended %s", out.Status)
		}
	}
	return r
}

// subAgentEnd is the subagent_end chunk a child writes into its parent's
// part of the stream when its run ends, with its output or {"error": …}.
func subAgentEnd(run RunInfo, result json.RawMessage) helix.Chunk {
	p := run.Parent
	return &helix.SubAgentEndChunk{
		Base:         helix.Base{AgentID: p.SessionID, AgentType: p.AgentType, Timestamp: nowMS(), Step: p.Step},
		SubAgentType: run.AgentType, SubSessionID: run.SessionID, CallID: p.ToolCallID, Result: result,
	}
}

func ptr[T any](v T) *T { return &v }

// errorResult is the JSON the parent's model reads for a failed child.
func errorResult(msg string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"error": msg})
	return b
}
