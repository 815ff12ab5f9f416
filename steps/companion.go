package steps

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/google/uuid"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// Step names of companion calls.
const (
	NameCompanion          = "helix.companion"
	NameCompanionCancel    = "helix.companion_cancel"
	NameCompanionWaitEnded = "helix.companion_wait_ended"
	NameDeliverCompletions = "helix.deliver_completions"
)

// OutcomeEvent is the DBOS event a persistent companion's run sets when it
// ends, with its Outcome: waitForResult waits on it (durably, woken by
// Postgres NOTIFY).
const OutcomeEvent = "helix.outcome"

// DefaultWaitTimeout bounds companion__waitForResult without timeoutSeconds.
const DefaultWaitTimeout = 10 * time.Minute

// CodeCompanion is the tool_end error code of a refused or failed companion call.
const CodeCompanion = "companion_error"

// CompanionInput is one companion call of a parent step.
type CompanionInput struct {
	Run  RunInfo        `json:"run"`
	Step int            `json:"step"`
	Call helix.ToolCall `json:"call"`
	// Trace is a spawned companion's tracing context: the parent's trace,
	// with the call's span as parent. Never recorded (tracing changes no
	// step's input or output); nil stores none.
	Trace *store.TracingContext `json:"-"`
}

// CompanionOutput says what the workflow does with a companion call: take
// Result now; start the run in Start (waiting for its outcome when Wait);
// wait for the run of workflow WaitWorkflowID (waitForResult); or cancel
// workflow Cancel and take Result.
type CompanionOutput struct {
	Result         *ToolResult              `json:"result,omitempty"`
	Start          *store.CompanionDispatch `json:"start,omitempty"`
	Wait           bool                     `json:"wait,omitempty"`
	WaitWorkflowID string                   `json:"waitWorkflowId,omitempty"`
	WaitSessionID  string                   `json:"waitSessionId,omitempty"`
	WaitTimeoutMS  int64                    `json:"waitTimeoutMs,omitempty"`
	Cancel         string                   `json:"cancel,omitempty"`
}

// Companion returns the transaction that performs the durable part of a
// companion call (spawnAgent, sendMessage, listChildren, getChildStatus,
// terminateChild, waitForResult) and tells the workflow what is left to do
// with DBOS (start or wait for a run, cancel a workflow).
func (e *Env) Companion(in CompanionInput) dbos.Txn[CompanionOutput] {
	return func(ctx context.Context, tx dbos.Tx) (CompanionOutput, error) {
		run, call := in.Run, in.Call
		refuse := func(format string, args ...any) (CompanionOutput, error) {
			return CompanionOutput{Result: &ToolResult{ToolCallID: call.ID, ToolName: call.Name,
				Error: fmt.Sprintf(format, args...), ErrorCode: CodeCompanion}}, nil
		}
		answer := func(v any) (CompanionOutput, error) {
			b, err := json.Marshal(v)
			if err != nil {
				return CompanionOutput{}, err
			}
			return CompanionOutput{Result: &ToolResult{ToolCallID: call.ID, ToolName: call.Name, Result: b}}, nil
		}
		def, err := e.RunAgent(run)
		if err != nil {
			return refuse("%v", err)
		}
		tool, ok := def.Tools[call.Name]
		if !ok || !tool.IsCompanion() {
			return refuse("%q is not a companion tool of agent %q", call.Name, run.AgentType)
		}
		args := argsOrEmpty(call.Arguments)
		if err := tool.ValidateArguments(args); err != nil {
			return refuse("%v", err)
		}
		var a struct {
			AgentType      string `json:"agentType"`
			Name           string `json:"name"`
			Message        string `json:"message"`
			Reason         string `json:"reason"`
			TimeoutSeconds int    `json:"timeoutSeconds"`
		}
		if err := json.Unmarshal(args, &a); err != nil {
			return refuse("decode the arguments: %v", err)
		}
		s := e.InTx(tx)
		switch call.Name {
		case helix.CompanionSpawnAgent, helix.CompanionSendMessage:
			p := store.CompanionDispatchParams{Kind: store.DispatchSpawn, ParentSessionID: run.SessionID, ParentRunID: run.RunID,
				ParentAgentType: run.AgentType, ParentStep: in.Step, ToolCallID: call.ID, AgentType: a.AgentType, Name: a.Name,
				Message: a.Message, RunID: uuid.Must(uuid.NewV7()).String(), TracingContext: in.Trace,
				Metadata: map[string]string{MetaParentToolCallID: call.ID, MetaParentRunID: run.RunID,
					MetaParentAgentType: run.AgentType, MetaParentStep: strconv.Itoa(in.Step)}}
			if call.Name == helix.CompanionSendMessage {
				p.Kind = store.DispatchSend
				ref, child, err := s.Companion(ctx, run.SessionID, a.Name)
				if err != nil {
					return CompanionOutput{}, err
				}
				if ref == nil {
					return refuse("no companion named %q: spawn it first (spawnAgent)", a.Name)
				}
				p.AgentType = child.AgentType
			}
			decl, ok := def.Agent.PersistentAgent(p.AgentType)
			if !ok {
				return refuse("%q is not one of this agent's companions", p.AgentType)
			}
			p.Blocking, p.InitialState = decl.EffectiveMode() == helix.CompanionBlocking, decl.Agent.InitialState
			d, err := s.DispatchCompanion(ctx, p)
			if err != nil {
				return CompanionOutput{}, err
			}
			switch d.Action {
			case store.ActionRefused:
				return refuse("%s", d.Error)
			case store.ActionDelivered:
				return answer(map[string]string{"status": "delivered", "name": d.Name,
					"note": "the companion is running: it reads the message before its next step"})
			}
			e.Log.Info().Ctx(ctx).Str("event", "companion."+d.How).Str("sessionId", run.SessionID).Str("companion", d.SessionID).
				Str("workflowId", d.WorkflowID).Bool("blocking", p.Blocking).Msg("companion run started")
			return CompanionOutput{Start: d, Wait: p.Blocking}, nil
		case helix.CompanionListChildren:
			refs, err := s.GetSubSessionRefs(ctx, run.SessionID)
			if err != nil {
				return CompanionOutput{}, err
			}
			list := []map[string]string{}
			for _, r := range refs {
				if r.Mode == helix.SubSessionPersistent {
					list = append(list, map[string]string{"name": r.Name, "agentType": r.AgentType, "sessionId": r.SubSessionID, "status": string(r.Status)})
				}
			}
			return answer(map[string]any{"children": list})
		case helix.CompanionGetChildStatus, helix.CompanionWaitForResult:
			ref, child, err := s.Companion(ctx, run.SessionID, a.Name)
			if err != nil {
				return CompanionOutput{}, err
			}
			if ref == nil {
				return refuse("no companion named %q", a.Name)
			}
			if call.Name == helix.CompanionGetChildStatus || ref.Status.Final() || child.Status != helix.SessionActive {
				out, err := answer(companionStatus(ref, child))
				if err == nil && call.Name == helix.CompanionWaitForResult {
					err = s.MarkDelivered(ctx, run.SessionID, ref.SubSessionID)
				}
				return out, err
			}
			cur, err := s.GetCurrentRun(ctx, child.SessionID)
			if err != nil {
				return CompanionOutput{}, err
			}
			timeout := DefaultWaitTimeout
			if a.TimeoutSeconds > 0 {
				timeout = time.Duration(a.TimeoutSeconds) * time.Second
			}
			// The workflow whose end ends the run: its own, its current
			// continuation, or, for a run that hibernated, its next one (a
			// run that hibernates again within the wait is still running
			// when the wait ends).
			wf := cur.CurrentWorkflowID()
			if cur.HibernatedAt != nil {
				wf = store.WakeWorkflowID(cur.WorkflowID, cur.Wakes+1)
			}
			return CompanionOutput{WaitWorkflowID: wf, WaitSessionID: child.SessionID, WaitTimeoutMS: timeout.Milliseconds()}, nil
		case helix.CompanionTerminateChild:
			wf, err := s.TerminateCompanion(ctx, run.SessionID, a.Name, a.Reason)
			if err != nil {
				return refuse("%v", err)
			}
			out, err := answer(map[string]string{"status": "terminated", "name": a.Name})
			out.Cancel = wf
			return out, err
		}
		return refuse("unknown companion tool %q", call.Name)
	}
}

// companionStatus is what getChildStatus and waitForResult report.
func companionStatus(ref *store.SubSessionRef, child *store.SessionState) map[string]any {
	out := map[string]any{"name": ref.Name, "agentType": ref.AgentType, "status": string(ref.Status)}
	switch {
	case child.Status == helix.SessionCompleted:
		out["output"] = child.Output
	case child.Error != "":
		out["error"] = child.Error
	}
	return out
}

// CompanionResult turns the outcome of a companion's run the parent waited
// for into the call's result: its output, or the failure (a failed
// companion is reported failed).
func CompanionResult(call helix.ToolCall, name string, out Outcome, err error) ToolResult {
	r := ChildResult(call, out, err)
	if r.Error != "" {
		r.Error, r.ErrorCode = fmt.Sprintf("companion %q failed: %s", name, r.Error), CodeCompanion
	}
	return r
}

// StartedResult is the result of a non-blocking spawn or consultation.
func StartedResult(call helix.ToolCall, d *store.CompanionDispatch) ToolResult {
	b, _ := json.Marshal(map[string]string{"status": d.How, "name": d.Name, "sessionId": d.SessionID,
		"note": "the companion works on its own; its answer arrives as a message when it finishes"})
	return ToolResult{ToolCallID: call.ID, ToolName: call.Name, Result: b}
}

// CancelWorkflow returns the step that cancels a terminated companion's
// workflow (idempotent).
func (e *Env) CancelWorkflow(workflowID string) dbos.Step[bool] {
	return func(ctx context.Context) (bool, error) {
		if e.DBOS == nil || workflowID == "" {
			return false, nil
		}
		if err := dbos.CancelWorkflow(e.DBOS, workflowID); err != nil {
			return false, fmt.Errorf("cancel the companion's workflow %s: %w", workflowID, err)
		}
		return true, nil
	}
}

// WaitEnded returns the transaction that ends a waitForResult whose wait
// saw the companion's run end: it marks the outcome delivered and answers
// with the companion's status, as a waitForResult that finds the companion
// already ended does.
func (e *Env) WaitEnded(run RunInfo, call helix.ToolCall, childSessionID string) dbos.Txn[ToolResult] {
	return func(ctx context.Context, tx dbos.Tx) (ToolResult, error) {
		s := e.InTx(tx)
		refs, err := s.GetSubSessionRefs(ctx, run.SessionID)
		if err != nil {
			return ToolResult{}, err
		}
		i := slices.IndexFunc(refs, func(r store.SubSessionRef) bool { return r.SubSessionID == childSessionID })
		if i < 0 {
			return ToolResult{}, fmt.Errorf("steps: session %s has no companion %s", run.SessionID, childSessionID)
		}
		child, err := s.LoadState(ctx, childSessionID)
		if err != nil {
			return ToolResult{}, err
		}
		if err := s.MarkDelivered(ctx, run.SessionID, childSessionID); err != nil {
			return ToolResult{}, err
		}
		b, err := json.Marshal(companionStatus(&refs[i], child))
		return ToolResult{ToolCallID: call.ID, ToolName: call.Name, Result: b}, err
	}
}

// DeliverCompletions returns the transaction that hands the parent, as user
// messages, the outcomes of its companions that ended since (each exactly
// once), before its next model call.
func (e *Env) DeliverCompletions(run RunInfo) dbos.Txn[int] {
	return func(ctx context.Context, tx dbos.Tx) (int, error) {
		return e.InTx(tx).DeliverCompletions(ctx, run.SessionID, func(r store.SubSessionRef, child *store.SessionState) helix.Message {
			b, _ := json.Marshal(companionStatus(&r, child))
			return helix.UserMessage(fmt.Sprintf("[companion %s finished] %s", r.Name, b))
		})
	}
}

// StillRunningResult is waitForResult's answer when the wait timed out.
func StillRunningResult(call helix.ToolCall) ToolResult {
	return ToolResult{ToolCallID: call.ID, ToolName: call.Name,
		Result: json.RawMessage(`{"status":"running","note":"the companion has not finished yet; wait again or do something else"}`)}
}
