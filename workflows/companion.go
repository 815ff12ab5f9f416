package workflows

import (
	"errors"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store"
)

// runCompanions runs a step's companion calls in the model's order, after
// phase 1 (they have their own phase): each is a transaction that does the
// durable part (steps.Companion), then what is left with DBOS: a
// companion's run started as a child workflow (waited for when the
// companion is blocking), a durable wait for its current run's outcome
// (waitForResult, woken by NOTIFY), or a terminated companion's workflow
// cancelled. A blocking companion stopped by the parent's interrupt is
// returned with the children the step waits for in stopped, one whose run
// hibernated in asleep.
func (t *turn) runCompanions(step int, calls []helix.ToolCall, idx []int, results []steps.ToolResult) (stopped, asleep []store.SuspendedChildWait, err error) {
	for _, i := range idx {
		// The call's span (when this execution runs it with tracing on) is
		// the parent of a spawned companion's runs.
		span, tc := t.childTrace(step, calls[i])
		err := t.runCompanion(step, calls[i], tc, &results[i], &stopped, &asleep)
		if span != nil {
			if err == nil && results[i].ToolCallID != "" {
				steps.EndToolSpan(span, results[i], time.Time{})
			} else {
				span.End()
			}
		}
		if err != nil {
			return nil, nil, err
		}
	}
	return stopped, asleep, nil
}

// runCompanion runs one companion call: its result, or the wait for its
// stopped companion added to stopped, or for its companion whose run
// hibernated (waiting for people) added to asleep.
func (t *turn) runCompanion(step int, call helix.ToolCall, tc *store.TracingContext, result *steps.ToolResult,
	stopped, asleep *[]store.SuspendedChildWait) error {
	o, err := runTxn(t.ctx, t.j, steps.NameCompanion, t.env.Companion(steps.CompanionInput{Run: t.run, Step: step, Call: call, Trace: tc}))
	if err != nil {
		return err
	}
	switch {
	case o.Start != nil:
		// A blocking companion's run hibernates only when this run can
		// hibernate for it; nobody waits in place for another one.
		h, err := dbos.RunWorkflow(t.ctx, t.self, TurnInput{SessionID: o.Start.SessionID, RunID: o.Start.RunID, Live: o.Wait && !t.hibernates()},
			dbos.WithWorkflowID(o.Start.WorkflowID))
		if err != nil {
			return err
		}
		if !o.Wait {
			*result = steps.StartedResult(call, o.Start)
			return nil
		}
		out, err := h.GetResult(dbos.WithHandlePollingInterval(childPollInterval))
		if err != nil && t.ctx.Err() != nil {
			return err
		}
		if err == nil && (out.Status == helix.RunInterrupted || out.Hibernated) {
			w := store.SuspendedChildWait{ParentToolCallID: call.ID, SubSessionID: o.Start.SessionID,
				AgentType: o.Start.AgentType, WorkflowID: o.Start.WorkflowID, Companion: o.Start.Name}
			if out.Hibernated {
				*asleep = append(*asleep, w)
			} else {
				*stopped = append(*stopped, w)
			}
			return nil
		}
		*result = steps.CompanionResult(call, o.Start.Name, out, err)
	case o.WaitWorkflowID != "":
		out, err := dbos.GetEvent[*steps.Outcome](t.ctx, o.WaitWorkflowID, steps.OutcomeEvent, time.Duration(o.WaitTimeoutMS)*time.Millisecond)
		if err != nil && !errors.Is(err, dbos.ErrTimeout) {
			return err
		}
		if out == nil {
			*result = steps.StillRunningResult(call)
			return nil
		}
		r, err := runTxn(t.ctx, t.j, steps.NameCompanionWaitEnded, t.env.WaitEnded(t.run, call, o.WaitSessionID))
		if err != nil {
			return err
		}
		*result = r
	case o.Cancel != "":
		if _, err := runStep(t.ctx, t.j, steps.NameCompanionCancel, recordNow, fenced(t, t.env.CancelWorkflow(o.Cancel))); err != nil {
			return err
		}
		*result = *o.Result
	default:
		*result = *o.Result
	}
	return nil
}

// deliverCompletions hands the agent the outcomes of its companions that
// ended since its last step, as messages, before its model call.
func (t *turn) deliverCompletions() error {
	if len(t.def.Agent.PersistentAgents) == 0 {
		return nil
	}
	t.messageCount = 0 // the delivery may append messages
	_, err := runTxn(t.ctx, t.j, steps.NameDeliverCompletions, t.env.DeliverCompletions(t.run))
	return err
}
