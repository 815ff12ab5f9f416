package steps

import (
	"context"
	"fmt"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/google/uuid"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// Step names of the sub-agent cascade.
const (
	NameInterruptForChildren = "helix.interrupt_for_children"
	NameResumeChild          = "helix.resume_child"
	NameSaveChildWait        = "helix.save_child_wait"
)

// ChildWaitInput is a parent step stopped by an interrupt while sub-agents
// of the step ran: the step's record and the children it waits for.
type ChildWaitInput struct {
	Run      RunInfo                    `json:"run"`
	Record   SuspendedStep              `json:"record"`
	Children []store.SuspendedChildWait `json:"children"`
}

// ChildWaitOutput reports whether the parent ended interrupted.
type ChildWaitOutput struct {
	Interrupted bool   `json:"interrupted,omitempty"`
	Reason      string `json:"reason,omitempty"`
}

// InterruptForChildren returns the transaction that ends a parent's run
// interrupted when its sub-agents stopped on the parent's interrupt (see
// store.CascadeStore.InterruptForChildren): the step is recorded with the
// children it waits for, which are marked failed with failureReason
// parent_suspended, to be re-spawned when the parent resumes.
func (e *Env) InterruptForChildren(in ChildWaitInput) dbos.Txn[ChildWaitOutput] {
	return func(ctx context.Context, tx dbos.Tx) (ChildWaitOutput, error) {
		rec, stepID, err := storedRecord(in.Record)
		if err != nil {
			return ChildWaitOutput{}, err
		}
		children := make(map[string]store.SuspendedChildWait, len(in.Children))
		for _, c := range in.Children {
			children[c.ParentToolCallID] = c
		}
		res, err := e.InTx(tx).InterruptForChildren(ctx, store.InterruptForChildrenParams{
			SessionID: in.Run.SessionID, RunID: in.Run.RunID, StepID: stepID, Step: in.Record.Step,
			Record: rec, Children: children, Interrupted: interruptedChunk(in.Run, in.Record.Step-1, ""),
		})
		if err != nil {
			return ChildWaitOutput{}, err
		}
		if res.Interrupted {
			e.Log.Info().Ctx(ctx).Str("event", "subagent.parent_interrupted").Str("sessionId", in.Run.SessionID).Str("runId", in.Run.RunID).
				Int("children", len(children)).Msg("the parent stopped with sub-agents in flight; they are re-spawned when it resumes")
		}
		return ChildWaitOutput{Interrupted: res.Interrupted, Reason: res.InterruptReason}, nil
	}
}

// SaveChildWait returns the transaction that records a step of a queued
// run whose segment ends while the step's sub-agents run (they are queued
// runs of their own): the step's record and the children it waits for, for
// the run's next segment to finish the step with their outcomes.
func (e *Env) SaveChildWait(in ChildWaitInput) dbos.Txn[bool] {
	return func(ctx context.Context, tx dbos.Tx) (bool, error) {
		rec, stepID, err := storedRecord(in.Record)
		if err != nil {
			return false, err
		}
		children := make(map[string]store.SuspendedChildWait, len(in.Children))
		for _, c := range in.Children {
			children[c.ParentToolCallID] = c
		}
		return true, e.InTx(tx).SaveChildWait(ctx, store.SaveChildWaitParams{SessionID: in.Run.SessionID,
			StepID: stepID, Record: rec, Children: children})
	}
}

// ResumeChildInput is one child a resumed parent step waits for.
type ResumeChildInput struct {
	Run  RunInfo                  `json:"run"`
	Call helix.ToolCall           `json:"call"`
	Wait store.SuspendedChildWait `json:"wait"`
}

// ResumeChildOutput is what the parent does with the child: take its
// Result now, or wait for the run RunID (workflow WorkflowID: with Ended,
// the continuation in which the run ended, whose outcome is taken as a
// parent waiting in place takes it); Asleep, for
// a child whose run hibernated (its workflow ended: the parent hibernates
// too, and the child's end wakes it); Stopped, for a child that ended
// interrupted (the parent decides whether its own interrupt stopped it).
type ResumeChildOutput struct {
	Result     *ToolResult `json:"result,omitempty"`
	RunID      string      `json:"runId,omitempty"`
	WorkflowID string      `json:"workflowId,omitempty"`
	Ended      bool        `json:"ended,omitempty"`
	Asleep     bool        `json:"asleep,omitempty"`
	Stopped    bool        `json:"stopped,omitempty"`
}

// ResumeChild returns the transaction that decides, from the child's
// durable state, what a resumed parent does with a child its step waits
// for (the specification's γ-cascade table): a completed child's output is
// the result; a child failed with parent_suspended is re-spawned from
// scratch (a new run, workflow {childSessionId}-respawn-{parentRunId}); a
// child failed otherwise or terminated is a failure result; an interrupted
// one is stopped (the parent's interrupt decides); a running child is
// waited for, and one whose run hibernated is asleep.
func (e *Env) ResumeChild(in ResumeChildInput) dbos.Txn[ResumeChildOutput] {
	return func(ctx context.Context, tx dbos.Tx) (ResumeChildOutput, error) {
		s := e.InTx(tx)
		st, err := s.LoadState(ctx, in.Wait.SubSessionID)
		if err != nil {
			return ResumeChildOutput{}, err
		}
		failed := func(msg string) (ResumeChildOutput, error) {
			r := ToolResult{ToolCallID: in.Call.ID, ToolName: in.Call.Name, Error: msg, ErrorCode: CodeSubAgentFailed}
			return ResumeChildOutput{Result: &r}, nil
		}
		if st.Status == helix.SessionCompleted || st.Status == helix.SessionFailed && st.FailureReason != helix.FailureReasonParentSuspended {
			run, err := s.GetCurrentRun(ctx, st.SessionID)
			if err != nil {
				return ResumeChildOutput{}, err
			}
			if run.Wakes > 0 && run.Status.Final() {
				// It ended in a continuation after it hibernated: its
				// outcome, exactly as a parent waiting in place gets it
				// (the session's output is jsonb's rendering of it).
				return ResumeChildOutput{RunID: run.RunID, WorkflowID: run.CurrentWorkflowID(), Ended: true}, nil
			}
		}
		switch {
		case st.Status == helix.SessionCompleted:
			r := ToolResult{ToolCallID: in.Call.ID, ToolName: in.Call.Name, Result: st.Output}
			return ResumeChildOutput{Result: &r}, nil
		case st.Status == helix.SessionFailed && st.FailureReason == helix.FailureReasonParentSuspended:
			def, err := e.Agent(st.AgentType)
			if err != nil {
				return failed(err.Error())
			}
			out := ResumeChildOutput{RunID: uuid.Must(uuid.NewV7()).String(),
				WorkflowID: fmt.Sprintf("%s-respawn-%s", st.SessionID, in.Run.RunID)}
			if _, err := s.RespawnChild(ctx, store.RespawnParams{SessionID: st.SessionID, RunID: out.RunID,
				WorkflowID: out.WorkflowID, KeepMessages: 1, CustomState: def.Agent.InitialState}); err != nil {
				return ResumeChildOutput{}, err
			}
			e.Log.Info().Ctx(ctx).Str("event", "subagent.respawned").Str("sessionId", in.Run.SessionID).Str("subSessionId", st.SessionID).
				Str("workflowId", out.WorkflowID).Msg("re-spawning a sub-agent stopped by its parent's interrupt")
			return out, nil
		case st.Status == helix.SessionActive:
			run, err := s.GetCurrentRun(ctx, st.SessionID)
			if err != nil {
				return ResumeChildOutput{}, err
			}
			// A run that hibernated ended its workflow: a continuation of
			// its own, if any, goes on without the parent.
			asleep := run.HibernatedAt != nil || run.Wakes > 0
			return ResumeChildOutput{RunID: run.RunID, WorkflowID: run.WorkflowID, Asleep: asleep}, nil
		case st.Status == helix.SessionInterrupted && st.Mode == helix.SessionModePersistent:
			// A companion keeps its memory: continue it where it stopped.
			cas, err := s.CompareAndSetStatus(ctx, st.SessionID, []helix.SessionStatus{helix.SessionInterrupted}, helix.SessionActive, nil)
			if err != nil {
				return ResumeChildOutput{}, err
			}
			if !cas.OK {
				return failed(fmt.Sprintf("the companion changed status (%s) while the parent resumed", cas.CurrentStatus))
			}
			if err := s.ClearInterruptFlag(ctx, st.SessionID); err != nil {
				return ResumeChildOutput{}, err
			}
			latest, err := s.LatestSequence(ctx, st.StreamID)
			if err != nil {
				return ResumeChildOutput{}, err
			}
			out := ResumeChildOutput{RunID: uuid.Must(uuid.NewV7()).String(), WorkflowID: fmt.Sprintf("%s-resume-%s", st.SessionID, in.Run.RunID)}
			if _, err := s.CreateRun(ctx, store.CreateRunParams{RunID: out.RunID, SessionID: st.SessionID, StartSequence: latest,
				WorkflowID: out.WorkflowID}); err != nil {
				return ResumeChildOutput{}, err
			}
			if err := s.UpdateSubSessionRef(ctx, in.Run.SessionID, store.SubSessionRefUpdate{SubSessionID: st.SessionID,
				Status: ptr(helix.SubSessionRunning)}); err != nil {
				return ResumeChildOutput{}, err
			}
			return out, nil
		case st.Status == helix.SessionInterrupted:
			return ResumeChildOutput{Stopped: true}, nil
		default:
			return failed(fmt.Sprintf("the sub-agent is %s: %s", st.Status, st.Error))
		}
	}
}
