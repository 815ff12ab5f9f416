package workflows

import (
	"fmt"
	"slices"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"go.opentelemetry.io/otel/trace"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store"
)

// childPollInterval is how often a recovered parent checks a child workflow
// it did not start in this process (DBOS hands the first execution's
// parent the child's result in memory, with no polling).
const childPollInterval = 100 * time.Millisecond

// child is a sub-agent run a parent step waits for.
type child struct {
	index  int
	handle dbos.WorkflowHandle[steps.Outcome]
	// workflowID is the child run's workflow; topic, for a child that is a
	// queued run of its own, where it reports its outcome.
	workflowID, topic string
	// span is the call's span, when its dispatch ran in this execution
	// with tracing on (the parent of the child's run spans).
	span trace.Span
	// companion names a persistent companion (its result reads as a
	// companion's).
	companion string
}

// childTopic is the DBOS message topic on which the sub-agent of call
// callID of a step reports its outcome to its parent run's driver.
func childTopic(step int, callID string) string {
	return fmt.Sprintf("helix.child.%d.%s", step, callID)
}

// startChildren dispatches the sub-agent calls at subs (one transaction
// each) and starts each child's run as a DBOS child workflow with its
// deterministic ID; a replay gets the same children back (DBOS starts a
// workflow ID once). A call that could not be dispatched gets its failure
// result at once. With queued, each child's run is admitted through the
// segment's queue as a run of its own that reports its outcome to this
// run's driver.
func (t *turn) startChildren(step int, calls []helix.ToolCall, subs []int, results []steps.ToolResult, queued bool) ([]child, error) {
	var out []child
	for _, i := range subs {
		span, tc := t.childTrace(step, calls[i])
		d, err := runTxn(t.ctx, t.j, steps.NameDispatchSubAgent, t.env.DispatchSubAgent(steps.DispatchInput{Run: t.run, Step: step, Call: calls[i], Trace: tc}))
		if err != nil || d.Failure != nil {
			if span != nil {
				if d.Failure != nil {
					steps.EndToolSpan(span, *d.Failure, time.Time{})
				} else {
					span.End()
				}
			}
			if err != nil {
				return nil, err
			}
			results[i] = *d.Failure
			continue
		}
		in := TurnInput{SessionID: d.SessionID, RunID: d.RunID, Live: !t.hibernates()}
		c := child{index: i, workflowID: d.WorkflowID, span: span}
		if queued {
			c.topic = childTopic(step, calls[i].ID)
			in.Queue, in.Driver, in.Notify = t.adm, d.WorkflowID, &ChildNotify{Driver: t.reportTo, Topic: c.topic}
		}
		h, err := dbos.RunWorkflow(t.ctx, t.self, in, dbos.WithWorkflowID(d.WorkflowID))
		if err != nil {
			if span != nil {
				span.End()
			}
			return nil, err
		}
		c.handle = h
		out = append(out, c)
	}
	return out, nil
}

// detachChildren runs phase 1 of a queued run's step that has sub-agents:
// the sub-agents as queued runs of their own, the tools here; then it
// records the step with the children it waits for and ends the segment,
// naming them for the driver (which waits for their outcomes holding no
// slot, and hands them to the next segment: resumeStopped). A step whose
// sub-agents could not be dispatched goes on here.
func (t *turn) detachChildren(step int, res helix.StepResult, p stepPlan, results []steps.ToolResult) (steps.Outcome, bool, error) {
	calls := res.ToolCalls
	children, err := t.startChildren(step, calls, p.subs, results, true)
	if err != nil {
		return steps.Outcome{}, true, err
	}
	for _, c := range children {
		if c.span != nil {
			c.span.End() // the run's driver waits for the child, not this segment
		}
	}
	if err := t.runTools(step, calls, p.phase1, results); err != nil {
		return steps.Outcome{}, true, err
	}
	if len(children) == 0 {
		if len(p.pending) > 0 {
			return t.suspend(step, res, results, p.pending)
		}
		return t.finish(step, res, results, "", false)
	}
	in := steps.ChildWaitInput{Run: t.run, Record: steps.SuspendedStep{RunID: t.run.RunID, Step: step, Model: res, Results: results}}
	out := steps.Outcome{Status: helix.RunSuspendedAwaitingChildren, Steps: step - 1}
	for _, c := range children {
		call := calls[c.index]
		in.Children = append(in.Children, store.SuspendedChildWait{ParentToolCallID: call.ID,
			SubSessionID: steps.SubSessionID(t.run.SessionID, call.ID), AgentType: t.def.Tools[call.Name].SubAgent().Name, WorkflowID: c.workflowID})
		out.Children = append(out.Children, steps.AwaitChild{ToolCallID: call.ID, WorkflowID: c.workflowID, Topic: c.topic})
	}
	if _, err := runTxn(t.ctx, t.j, steps.NameSaveChildWait, t.env.SaveChildWait(in)); err != nil {
		return steps.Outcome{}, true, err
	}
	return out, true, nil
}

// awaitChildren waits for each child's run, in the model's order, and turns
// its outcome into the call's result (the output, or {"error": …}). Each
// wait is a recorded step: a replay does not wait again. The children that
// ended interrupted are returned in stopped, those whose runs hibernated
// (waiting for people) in asleep, their results left empty: the parent
// decides whether its own interrupt stopped the former, and waits for the
// latter asleep (hibernateForChildren).
func (t *turn) awaitChildren(calls []helix.ToolCall, children []child, results []steps.ToolResult) (stopped, asleep []int, err error) {
	if len(children) == 0 {
		return nil, nil, nil // nothing to wait for: the records wait for the next write
	}
	if err := t.j.flush(t.ctx); err != nil {
		return nil, nil, err
	}
	for _, c := range children {
		out, err := c.handle.GetResult(dbos.WithHandlePollingInterval(childPollInterval))
		if err != nil && t.ctx.Err() != nil {
			if c.span != nil {
				c.span.End()
			}
			return nil, nil, err // shutdown or cancellation: not the child's outcome
		}
		if err == nil && (out.Status == helix.RunInterrupted || out.Hibernated) {
			if c.span != nil {
				c.span.End()
			}
			if out.Hibernated {
				asleep = append(asleep, c.index)
			} else {
				stopped = append(stopped, c.index)
			}
			continue
		}
		if err != nil {
			t.env.Log.Error().Ctx(t.logCtx()).Err(err).Str("event", "subagent.ended_abnormally").Str("sessionId", t.run.SessionID).
				Str("toolCallId", calls[c.index].ID).Msg("a sub-agent's workflow ended with an error; the call fails")
		}
		if c.companion != "" {
			results[c.index] = steps.CompanionResult(calls[c.index], c.companion, out, err)
		} else {
			results[c.index] = steps.ChildResult(calls[c.index], out, err)
		}
		if c.span != nil {
			steps.EndToolSpan(c.span, results[c.index], time.Time{})
		}
	}
	return stopped, asleep, nil
}

// childWaits describes the ephemeral sub-agents at idx as children a step
// waits for.
func (t *turn) childWaits(calls []helix.ToolCall, idx []int) []store.SuspendedChildWait {
	out := make([]store.SuspendedChildWait, 0, len(idx))
	for _, i := range idx {
		tool := t.def.Tools[calls[i].Name]
		out = append(out, store.SuspendedChildWait{ParentToolCallID: calls[i].ID,
			SubSessionID: steps.SubSessionID(t.run.SessionID, calls[i].ID), AgentType: tool.SubAgent().Name})
	}
	return out
}

// stopForChildren handles children of the step (sub-agents, blocking
// companions) that ended interrupted. When the parent's own interrupt
// stopped them (its flag is set), the parent ends interrupted too,
// recording the step and the children for its resume, which re-spawns the
// sub-agents and continues the companions (the γ-cascade); done reports
// that. A child interrupted on its own is a failed call.
func (t *turn) stopForChildren(step int, res helix.StepResult, results []steps.ToolResult, waits []store.SuspendedChildWait) (steps.Outcome, bool, error) {
	in := steps.ChildWaitInput{Run: t.run, Record: steps.SuspendedStep{RunID: t.run.RunID, Step: step, Model: res, Results: results},
		Children: waits}
	o, err := runTxn(t.ctx, t.j, steps.NameInterruptForChildren, t.env.InterruptForChildren(in))
	if err != nil {
		return steps.Outcome{}, true, err
	}
	if o.Interrupted {
		out, err := t.interrupted(step-1, o.Reason)
		return out, true, err
	}
	index := map[string]int{}
	for i, c := range res.ToolCalls {
		index[c.ID] = i
	}
	for _, w := range waits {
		i := index[w.ParentToolCallID]
		results[i] = steps.ChildResult(res.ToolCalls[i], steps.Outcome{Status: helix.RunInterrupted, Error: "interrupted on its own"}, nil)
	}
	return steps.Outcome{}, false, nil
}

// resumeStopped finishes a step whose parent was interrupted with children
// in flight (a fresh resume): each awaited child is drained, re-spawned or
// waited for as its durable state says (steps.ResumeChild), then the step
// goes on as after phase 1: calls that wait for human input suspend it,
// then it finishes.
func (t *turn) resumeStopped(rec steps.SuspendedStep, waits []store.SuspendedChildWait) (steps.Outcome, bool, error) {
	step, calls := rec.Step, rec.Model.ToolCalls
	results := rec.Results
	if len(results) < len(calls) {
		results = append(results, make([]steps.ToolResult, len(calls)-len(results))...)
	}
	index := map[string]int{}
	for i, c := range calls {
		index[c.ID] = i
	}
	var children []child
	var stoppedHere, asleepHere []int
	for _, w := range waits {
		i, ok := index[w.ParentToolCallID]
		if !ok {
			continue
		}
		if out, ok := t.childOutcomes[w.ParentToolCallID]; ok {
			// A queued run's child, whose outcome its driver took.
			if out.Status == helix.RunInterrupted {
				stoppedHere = append(stoppedHere, i)
			} else {
				results[i] = steps.ChildResult(calls[i], out, nil)
			}
			continue
		}
		o, err := runTxn(t.ctx, t.j, steps.NameResumeChild, t.env.ResumeChild(steps.ResumeChildInput{Run: t.run, Call: calls[i], Wait: w}))
		if err != nil {
			return steps.Outcome{}, true, err
		}
		switch {
		case o.Result != nil:
			results[i] = *o.Result
			continue
		case o.Stopped:
			stoppedHere = append(stoppedHere, i)
			continue
		case o.Asleep:
			asleepHere = append(asleepHere, i)
			continue
		}
		var h dbos.WorkflowHandle[steps.Outcome]
		if o.Ended {
			h, err = dbos.RetrieveWorkflow[steps.Outcome](t.ctx, o.WorkflowID)
		} else {
			h, err = dbos.RunWorkflow(t.ctx, t.self, TurnInput{SessionID: w.SubSessionID, RunID: o.RunID, Live: !t.hibernates()},
				dbos.WithWorkflowID(o.WorkflowID))
		}
		if err != nil {
			return steps.Outcome{}, true, err
		}
		children = append(children, child{index: i, handle: h, companion: w.Companion})
	}
	stopped, asleep, err := t.awaitChildren(calls, children, results)
	if err != nil {
		return steps.Outcome{}, true, err
	}
	stopped, asleep = append(stopped, stoppedHere...), append(asleep, asleepHere...)
	var again, sleeping []store.SuspendedChildWait
	for _, w := range waits {
		i, ok := index[w.ParentToolCallID]
		switch {
		case ok && slices.Contains(stopped, i):
			again = append(again, w)
		case ok && slices.Contains(asleep, i):
			sleeping = append(sleeping, w)
		}
	}
	if len(sleeping) > 0 {
		// Children still asleep: the step waits for them asleep again.
		out, err := t.hibernateForChildren(step, rec.Model, results, again, sleeping)
		return out, true, err
	}
	if len(again) > 0 {
		if out, done, err := t.stopForChildren(step, rec.Model, results, again); done || err != nil {
			return out, true, err
		}
	}
	p, err := t.plan(step, calls)
	if err != nil {
		return steps.Outcome{}, true, err
	}
	var open []steps.PendingCall
	for _, p := range p.pending {
		if results[p.Index].ToolCallID == "" {
			open = append(open, p)
		}
	}
	if len(open) > 0 {
		return t.suspend(step, rec.Model, results, open)
	}
	return t.finish(step, rec.Model, results, "", true)
}
