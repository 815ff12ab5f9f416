package workflows

import (
	"slices"

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

// hibernates reports whether this execution hibernates its waits, when
// the engine sets a hibernation delay: a run that starts at once, unless
// its parent waits for its workflow in place (TurnInput.Live: a
// sub-agent's or a blocking companion's run whose parent cannot
// hibernate). A queued run's segment never waits: it ends at the wait,
// and its driver waits and hibernates (driverHibernates).
func (t *turn) hibernates() bool {
	return t.env.HibernateAfter > 0 && t.segment == 0 && t.adm == nil && !t.live
}

// hibernateForChildren hibernates the run, whose step (model result res,
// results so far) waits for the sub-agents of asleep, whose runs
// hibernated, and decides the fate of those of stopped (ended interrupted)
// once the others ended. The end of any child wakes the run; its
// continuation finishes the step (resumeStopped). The workflow ends.
func (t *turn) hibernateForChildren(step int, res helix.StepResult, results []steps.ToolResult, stopped, asleep []store.SuspendedChildWait) (steps.Outcome, error) {
	in := steps.ChildHibernateInput{Wait: steps.ChildWaitInput{Run: t.run,
		Record: steps.SuspendedStep{RunID: t.run.RunID, Step: step, Model: res, Results: results}, Children: append(slices.Clip(stopped), asleep...)}}
	for _, w := range asleep {
		in.Asleep = append(in.Asleep, w.SubSessionID)
	}
	if _, err := runTxn(t.ctx, t.j, steps.NameHibernateForChildren, t.env.HibernateForChildren(in)); err != nil {
		return steps.Outcome{}, err
	}
	if t.j.ran {
		t.env.Log.Info().Ctx(t.logCtx()).Str("event", "run.hibernated").Str("sessionId", t.run.SessionID).Str("runId", t.run.RunID).
			Strs("subSessionIds", in.Asleep).Msg("the run waits for sub-agents that wait for people, with no workflow running it; their end wakes it")
	}
	return steps.Outcome{Status: helix.RunSuspendedAwaitingChildren, Steps: step - 1, Hibernated: true}, nil
}

// hibernate hibernates the run, which waits for the calls of pending that
// are not resolved (their results unknown in results), unless a message
// came for one of them meanwhile: done reports that it hibernated, with
// the outcome the workflow ends with. A replay returns the recorded
// decision.
func (t *turn) hibernate(step int, pending []store.PendingClientToolCall, results []steps.ToolResult) (out steps.Outcome, done bool, err error) {
	in := steps.HibernateInput{RunID: t.run.RunID, WorkflowID: t.run.WorkflowID, Wake: t.wake}
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
