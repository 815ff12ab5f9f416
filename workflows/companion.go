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
// returned with the children the step waits for.
func (t *turn) runCompanions(step int, calls []helix.ToolCall, idx []int, results []steps.ToolResult) (stopped []store.SuspendedChildWait, err error) {
	for _, i := range idx {
		call := calls[i]
		o, err := runTxn(t.ctx, t.j, steps.NameCompanion, t.env.Companion(steps.CompanionInput{Run: t.run, Step: step, Call: call}))
		if err != nil {
			return nil, err
		}
		switch {
		case o.Start != nil:
			h, err := dbos.RunWorkflow(t.ctx, t.self, TurnInput{SessionID: o.Start.SessionID, RunID: o.Start.RunID},
				dbos.WithWorkflowID(o.Start.WorkflowID))
			if err != nil {
				return nil, err
			}
			if !o.Wait {
				results[i] = steps.StartedResult(call, o.Start)
				continue
			}
			out, err := h.GetResult(dbos.WithHandlePollingInterval(childPollInterval))
			if err != nil && t.ctx.Err() != nil {
				return nil, err
			}
			if err == nil && out.Status == helix.RunInterrupted {
				stopped = append(stopped, store.SuspendedChildWait{ParentToolCallID: call.ID, SubSessionID: o.Start.SessionID,
					AgentType: o.Start.AgentType, WorkflowID: o.Start.WorkflowID})
				continue
			}
			results[i] = steps.CompanionResult(call, o.Start.Name, out, err)
		case o.WaitWorkflowID != "":
			out, err := dbos.GetEvent[*steps.Outcome](t.ctx, o.WaitWorkflowID, steps.OutcomeEvent, time.Duration(o.WaitTimeoutMS)*time.Millisecond)
			if err != nil && !errors.Is(err, dbos.ErrTimeout) {
				return nil, err
			}
			if out == nil {
				results[i] = steps.StillRunningResult(call)
				continue
			}
			r, err := runTxn(t.ctx, t.j, steps.NameCompanionWaitEnded, t.env.WaitEnded(t.run, call, o.WaitSessionID))
			if err != nil {
				return nil, err
			}
			results[i] = r
		case o.Cancel != "":
			if _, err := runStep(t.ctx, t.j, steps.NameCompanionCancel, recordNow, fenced(t, t.env.CancelWorkflow(o.Cancel))); err != nil {
				return nil, err
			}
			results[i] = *o.Result
		default:
			results[i] = *o.Result
		}
	}
	return stopped, nil
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
