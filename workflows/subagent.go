package workflows

import (
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/steps"
)

// childPollInterval is how often a recovered parent checks a child workflow
// it did not start in this process (DBOS hands the first execution's
// parent the child's result in memory, with no polling).
const childPollInterval = 100 * time.Millisecond

// child is a sub-agent run a parent step waits for.
type child struct {
	index  int
	handle dbos.WorkflowHandle[steps.Outcome]
}

// startChildren dispatches the sub-agent calls at subs (one transaction
// each) and starts each child's run as a DBOS child workflow with its
// deterministic ID; a replay gets the same children back (DBOS starts a
// workflow ID once). A call that could not be dispatched gets its failure
// result at once.
func (t *turn) startChildren(step int, calls []helix.ToolCall, subs []int, results []steps.ToolResult) ([]child, error) {
	var out []child
	for _, i := range subs {
		d, err := dbos.RunAsTransaction(t.ctx, t.env.DataSource,
			t.env.DispatchSubAgent(steps.DispatchInput{Run: t.run, Step: step, Call: calls[i]}),
			dbos.WithStepName(steps.NameDispatchSubAgent))
		if err != nil {
			return nil, err
		}
		if d.Failure != nil {
			results[i] = *d.Failure
			continue
		}
		h, err := dbos.RunWorkflow(t.ctx, t.self, TurnInput{SessionID: d.SessionID, RunID: d.RunID}, dbos.WithWorkflowID(d.WorkflowID))
		if err != nil {
			return nil, err
		}
		out = append(out, child{index: i, handle: h})
	}
	return out, nil
}

// awaitChildren waits for each child's run, in the model's order, and turns
// its outcome into the call's result (the output, or {"error": …}). Each
// wait is a recorded step: a replay does not wait again.
func (t *turn) awaitChildren(calls []helix.ToolCall, children []child, results []steps.ToolResult) error {
	for _, c := range children {
		out, err := c.handle.GetResult(dbos.WithHandlePollingInterval(childPollInterval))
		if err != nil && t.ctx.Err() != nil {
			return err // shutdown or cancellation: not the child's outcome
		}
		results[c.index] = steps.ChildResult(calls[c.index], out, err)
	}
	return nil
}
