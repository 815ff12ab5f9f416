package workflows

import (
	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store"
)

// Hibernation: a run that has waited steps.Env.HibernateAfter for people
// records what it waits for and ends its workflow, so that no goroutine
// and no memory of any process holds it (postgres.HibernateRun). Any
// message to the run's workflow (an answer, a wake-up for an interrupt)
// and its earliest deadline (the engines' wake sweep) wake it: its next
// continuation (WakeID) is due, and an engine starts it as it starts a
// recorded run. The continuation begins like a fresh execution of the
// run's suspended step (steps.BeginRun hands it the step and its pending
// calls), takes the messages sent to the run's workflow, and goes on in
// place: the suspension's hooks fired once, and its resumption's fire
// once, when the waits end.

// hibernates reports whether this execution hibernates its waits: a
// root run that starts at once (not a sub-agent's or a persistent
// companion's run, whose parents wait for their workflows), when the
// engine sets a hibernation delay. A queued run's segment never waits: it
// ends at the wait, and its driver waits and hibernates
// (driverHibernates).
func (t *turn) hibernates() bool {
	return t.env.HibernateAfter > 0 && t.segment == 0 && t.adm == nil && t.run.Parent == nil && !t.run.Persistent
}

// hibernate hibernates the run, which waits for the calls of pending that
// are not resolved (their results unknown in results), unless a message
// came for one of them meanwhile: done reports that it hibernated, with
// the outcome the workflow ends with. A replay returns the recorded
// decision.
func (t *turn) hibernate(step int, pending []store.PendingClientToolCall, results []steps.ToolResult) (out steps.Outcome, done bool, err error) {
	in := steps.HibernateInput{RunID: t.run.RunID, WorkflowID: t.run.WorkflowID}
	for _, c := range pending {
		if !waits(c, results) {
			continue
		}
		in.ToolCallIDs = append(in.ToolCallIDs, c.ToolCallID)
		if c.DeadlineAt > 0 && (in.WakeAt == 0 || c.DeadlineAt < in.WakeAt) {
			in.WakeAt = c.DeadlineAt
		}
	}
	h, err := runTxn(t.ctx, t.j, steps.NameHibernate, t.env.Hibernate(in))
	if err != nil || !h.Hibernated {
		return steps.Outcome{}, false, err
	}
	if t.j.ran {
		t.env.Log.Info().Ctx(t.logCtx()).Str("event", "run.hibernated").Str("sessionId", t.run.SessionID).Str("runId", t.run.RunID).
			Strs("toolCallIds", in.ToolCallIDs).Int64("wakeAt", in.WakeAt).
			Msg("the run waits for people with no workflow running it; an answer, an interrupt or a deadline wakes it")
	}
	return steps.Outcome{Status: helix.RunSuspendedClientTool, Steps: step - 1, Hibernated: true}, true, nil
}
