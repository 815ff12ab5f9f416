package workflows

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/recv"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// plan splits a step's calls (finish and finishWith aside) into the regular
// calls of phase 1, the sub-agent calls (which run in phase 1 too, as child
// workflows), the companion calls and the calls that wait for human input: client-executed
// tools and approval-gated tools whose gate requires approval. Predicate
// gates are asked in one step, so the decision is checkpointed. A call with
// invalid arguments goes to phase 1, where it fails at once: nobody is asked
// to run or approve a call the model got wrong.
func (t *turn) plan(step int, calls []helix.ToolCall) (p stepPlan, err error) {
	_, _, rest := t.classify(calls)
	var gated []int
	var phase1 []int
	var pending []steps.PendingCall
	for _, i := range rest {
		call := calls[i]
		tool, known := t.def.Tools[call.Name]
		switch {
		case known && tool.SubAgent() != nil:
			p.subs = append(p.subs, i) // the dispatch step validates and reports
			continue
		case known && tool.IsCompanion():
			p.comps = append(p.comps, i)
			continue
		}
		if !known || tool.ValidateArguments(argsOrEmpty(call)) != nil {
			phase1 = append(phase1, i)
			continue
		}
		switch {
		case tool.ExecutesOnClient():
			pending = append(pending, steps.PendingCall{Index: i, Call: call, Kind: helix.SubmissionClientToolResult})
		case tool.HasApprovalPredicate():
			gated = append(gated, i)
		case tool.NeedsApprovalCheck():
			pending = append(pending, steps.PendingCall{Index: i, Call: call, Kind: helix.SubmissionApprovalResponse})
		default:
			phase1 = append(phase1, i)
		}
	}
	if len(gated) > 0 {
		in := steps.ApprovalInput{Run: t.run, Step: step}
		for _, i := range gated {
			in.Calls = append(in.Calls, calls[i])
		}
		required, err := runStep(t.ctx, t.j, steps.NameApprovalGate, recordNow, fenced(t, t.env.EvaluateApprovals(in)))
		if err != nil {
			return stepPlan{}, err
		}
		for k, i := range gated {
			if k < len(required) && !required[k] {
				phase1 = append(phase1, i)
			} else {
				pending = append(pending, steps.PendingCall{Index: i, Call: calls[i], Kind: helix.SubmissionApprovalResponse})
			}
		}
	}
	sortInts(phase1)
	sortPendingCalls(pending)
	p.phase1, p.pending = phase1, pending
	return p, nil
}

// stepPlan is how a step's calls run (finish and finishWith aside): phase
// 1's tools and sub-agents, then the companion calls, then the calls that
// wait for human input.
type stepPlan struct {
	phase1, subs, comps []int
	pending             []steps.PendingCall
}

// suspend writes the step's suspension (phase 1 has run) and waits for its
// pending calls in place.
func (t *turn) suspend(step int, res helix.StepResult, results []steps.ToolResult, pending []steps.PendingCall) (steps.Outcome, bool, error) {
	for i := range results {
		if results[i].ToolCallID != "" {
			results[i].Recorded = true // the suspension writes their tool_end and usage
		}
	}
	rec := steps.SuspendedStep{RunID: t.run.RunID, Step: step, Model: res, Results: results}
	so, err := runTxn(t.ctx, t.j, steps.NameSuspendStep, t.env.SuspendStep(steps.SuspendInput{Run: t.run, Record: rec, Pending: pending}))
	if err != nil {
		return steps.Outcome{}, true, err
	}
	so.Restore(t.run)
	ids := make([]string, len(so.Pending))
	for i, c := range so.Pending {
		ids[i] = c.ToolCallID
	}
	if err := t.fire(step-1, steps.HookEvent{Kind: steps.HookAgentSuspended, Suspension: &helix.Suspension{ToolCallIDs: ids}}); err != nil {
		return steps.Outcome{}, true, err
	}
	if so.Interrupted {
		out, err := t.interrupted(step-1, so.Reason)
		return out, true, err
	}
	return t.await(rec, so.Pending, true)
}

// await waits for each pending call of a suspended step, in the model's
// order, and finishes the step once all are resolved. A call answered
// before is not waited for; a wake-up that answers nothing (an interrupt
// request that was withdrawn) waits again. An approved call runs its tool
// now, as a step. inPlace marks the run that suspended the step (it fires
// OnAgentResumed when the waits end; a fresh resume fired it at its start).
func (t *turn) await(rec steps.SuspendedStep, pending []store.PendingClientToolCall, inPlace bool) (steps.Outcome, bool, error) {
	step, calls := rec.Step, rec.Model.ToolCalls
	results := rec.Results
	if len(results) < len(calls) {
		results = append(results, make([]steps.ToolResult, len(calls)-len(results))...)
	}
	for i, c := range pending {
		if c.Index >= 0 && c.Index < len(results) && results[c.Index].ToolCallID != "" {
			continue // its result is known (an approved tool that ran before an interrupt)
		}
		// The wait ended in this execution (its own, or, in a queued run's
		// segment, its driver's, resolved here): traceWait.
		waitedHere := false
		for c.ConsumedAt == 0 {
			timedOut := false
			var take *steps.Take
			switch {
			case t.segment > 0 && t.timedOut == c.ToolCallID:
				timedOut, t.timedOut = true, ""
				waitedHere = !t.j.has(t.j.next) // the driver waited; this segment resolves
			case t.segment > 0 && slices.Contains(t.received, c.ToolCallID):
				// Its driver took its message: resolve it, once.
				t.received = slices.DeleteFunc(t.received, func(id string) bool { return id == c.ToolCallID })
				waitedHere = !t.j.has(t.j.next)
			case t.segment > 0 && c.Resolved() && (c.Submission == nil || c.SentTo != t.run.WorkflowID):
				// No message for the driver to take: answered before a
				// resume (to the interrupted run's workflow), or timed out.
			case t.segment > 0:
				// Its driver waits (holding no queue slot), even for an
				// answer already recorded: it takes every message once.
				return awaitOutcome(step-1, c.ToolCallID, c.DeadlineAt, waitingAfter(pending[i+1:], results)), true, nil
			case c.Resolved():
				if c.Submission != nil && c.SentTo == t.run.WorkflowID {
					// Answered before this execution began (a continuation
					// of a hibernated run): the message sent to the run's
					// workflow is taken with the resolution.
					take = &steps.Take{WorkflowID: t.run.WorkflowID, StepID: t.j.next}
					if t.begunHere && t.takesInCommit(rec, pending[i+1:], results) {
						// The step's last wait: the answer is taken in the
						// step's commit, as when the wait ended in place
						// (the run began here with no interrupt requested;
						// one requested since ends it at the commit).
						deferTxn(t.j, steps.NameResolveToolCall, t.env.ResolveToolCall(steps.ResolveInput{
							Run: t.run, Step: step, StepRunID: rec.RunID, Call: c, Take: take, LeaveInterrupt: true,
						}))
						c.ConsumedAt = max(c.SubmittedAt, 1) // here only: the loop ends
						continue
					}
				}
			default:
				// The records that wait (hooks) are written before a wait
				// that may outlast this process.
				if err := t.j.flush(t.ctx); err != nil {
					return steps.Outcome{}, true, err
				}
				replay := t.j.has(t.j.next)
				var hibernate bool
				var err error
				if timedOut, hibernate, err = t.wait(c); err != nil {
					return steps.Outcome{}, true, err
				}
				if hibernate {
					if out, done, err := t.hibernate(step, pending[i:], results); done || err != nil {
						return out, true, err
					}
					continue // a message came meanwhile: it is there
				}
				waitedHere = !replay
				take = &steps.Take{WorkflowID: t.run.WorkflowID, StepID: t.j.next}
				if !timedOut {
					if m, ok := t.answeredLast(c, rec, pending[i+1:], results); ok {
						// The step's last wait is over: the answer is
						// taken in the step's commit (one transaction),
						// the approved tool runs before it.
						deferTxn(t.j, steps.NameResolveToolCall, t.env.ResolveToolCall(steps.ResolveInput{
							Run: t.run, Step: step, StepRunID: rec.RunID, Call: c, Take: take, LeaveInterrupt: true,
						}))
						c = m
						c.ConsumedAt = max(m.SubmittedAt, 1) // here only: the loop ends
						continue
					}
				}
			}
			r, err := runTxn(t.ctx, t.j, steps.NameResolveToolCall, t.env.ResolveToolCall(steps.ResolveInput{
				Run: t.run, Step: step, StepRunID: rec.RunID, Call: c, TimedOut: timedOut, Take: take,
			}))
			if err != nil {
				return steps.Outcome{}, true, err
			}
			if r.Interrupted {
				out, err := t.interrupted(step-1, r.Reason)
				return out, true, err
			}
			c = r.Call
		}
		if c.Index < 0 || c.Index >= len(calls) {
			return steps.Outcome{}, true, errIndex(c, len(calls))
		}
		if waitedHere {
			t.traceWait(step, c, calls[c.Index])
		}
		if s := c.Submission; s != nil && s.IsApproved() {
			r, err := t.runToolStep(recordLater, steps.ToolInput{Run: t.run, Step: step, Call: calls[c.Index], Approval: steps.OutcomeApproved})
			if err != nil {
				return steps.Outcome{}, true, err
			}
			results[c.Index] = r
			// Durable beyond this run when a later call still waits: an
			// interrupt may end the run there, and a fresh resume must not
			// run the tool again. Without one, the step's commit follows
			// and records the tool (its record waits for it).
			if len(waitingAfter(pending[i+1:], results)) > 0 {
				rec.Results = results
				if _, err := runTxn(t.ctx, t.j, steps.NameSaveSuspendedStep, t.env.SaveSuspendedStep(t.run.SessionID, rec)); err != nil {
					return steps.Outcome{}, true, err
				}
			}
		} else {
			results[c.Index] = steps.OutcomeResult(c)
		}
	}
	if inPlace {
		if err := t.fire(step-1, steps.HookEvent{Kind: steps.HookAgentResumed, PreviousRunID: t.run.RunID}); err != nil {
			return steps.Outcome{}, true, err
		}
	}
	return t.finish(step, rec.Model, results, rec.RunID, true)
}

// answeredLast reports the answer to c, the step's last call to wait
// for, when the step can take it in its commit: the answer is recorded
// (and not taken), no interrupt is requested, no finishWith tool runs
// after the waits (its record would be written between), and this is not a
// replay (whose resolution is recorded on its own). It uses what the wait
// read last, locking nothing: the resolution in the commit's transaction
// works from the locked row, and the commit ends the run interrupted if a
// request arrives meanwhile.
func (t *turn) answeredLast(c store.PendingClientToolCall, rec steps.SuspendedStep, later []store.PendingClientToolCall,
	results []steps.ToolResult) (store.PendingClientToolCall, bool) {
	a := t.answer
	if a == nil || !t.takesInCommit(rec, later, results) {
		return c, false
	}
	if !a.Found || a.Interrupt || a.Call.Submission == nil || a.Call.ConsumedAt != 0 {
		return c, false
	}
	return a.Call, true
}

// takesInCommit reports whether the step's commit can take the answer to
// its call that waited last (later are the calls after it): no later call
// waits, no finishWith tool runs after the waits (its record would be
// written between), and this is not a replay (whose resolution is
// recorded on its own).
func (t *turn) takesInCommit(rec steps.SuspendedStep, later []store.PendingClientToolCall, results []steps.ToolResult) bool {
	if t.j.has(t.j.next) || len(waitingAfter(later, results)) > 0 {
		return false
	}
	_, phase2, _ := t.classify(rec.Model.ToolCalls)
	return len(phase2) == 0
}

// waitPoll bounds a wait between two looks at the call's messages, should
// a NOTIFY be lost (the engine's wake sweep re-sends those of answered
// calls every second; this is the last resort).
const waitPoll = 5 * time.Second

// wait returns when a message for the call waits for the run's workflow
// or, with a deadline, when it has passed (timedOut), or when the run has
// waited steps.Env.HibernateAfter and may hibernate (hibernate); at once
// when the call's resolution, or a hibernation, is already recorded (a
// replay). It records nothing: the resolution that follows takes the
// message and records the outcome. The deadline is read on the engine's
// clock (steps.Env.Clock), the one that stamped it: a test that moves the
// clock forward wakes the wait.
func (t *turn) wait(c store.PendingClientToolCall) (timedOut, hibernate bool, err error) {
	t.answer = nil
	if t.j.has(t.j.next) {
		return false, t.j.hasNamed(t.j.next, steps.NameHibernate), nil
	}
	wake, stop, err := t.env.Store.Watch(recv.NotifyChannel, recv.WakePayload(t.run.WorkflowID, c.ToolCallID))
	if err != nil {
		return false, false, err
	}
	defer stop()
	clock := t.env.Clock
	var sleepUntil time.Time
	if t.hibernates() {
		sleepUntil = clock.Now().Add(t.env.HibernateAfter)
	}
	for {
		var advanced <-chan struct{}
		if c.DeadlineAt > 0 || !sleepUntil.IsZero() {
			advanced = clock.Advanced() // before Now: a move in between closes it
		}
		var a postgres.Answer
		err := t.j.retry(t.ctx, "look for the answer to tool call "+c.ToolCallID, func(ctx context.Context) (err error) {
			a, err = t.env.Store.PeekAnswer(ctx, postgres.Waiter{SessionID: t.run.SessionID, RunID: t.run.RunID,
				WorkflowID: t.run.WorkflowID, Self: t.j.wfID, Wake: t.wake, Owner: t.j.owner}, c.ToolCallID, recv.Topic(c.ToolCallID))
			return err
		})
		if err != nil {
			return false, false, err
		}
		if !a.Owned {
			// This execution lost its workflow while it waited: cancelled
			// with DBOS's tools (and maybe resumed since), or taken over.
			// DBOS does not stop a cancelled execution that waits outside
			// its steps, and an answer can only come once the session runs
			// again, in the execution that owns the workflow now (a resume
			// revives an aborted session only after DBOS gave it a new
			// owner token; a message to a cancelled workflow is refused).
			// That answer wakes this execution too: acting on it would run
			// an approved tool a second time, the in-process fence (Fence)
			// stopping it only once the new execution took its ticket, and
			// never when the new execution runs in another process. It is
			// read in the same statement as the message, so whichever
			// answer this wait sees, it sees the new owner with it: this
			// execution ends here, recording nothing.
			return false, false, conflict(t.j.wfID)
		}
		if a.Asleep {
			// The run hibernated in this execution already: a replay whose
			// workflow's end DBOS did not record (the hibernation writes
			// no record). It hibernates again, writing nothing; the
			// answers, if any came, are the continuation's.
			return false, true, nil
		}
		if a.MessageWaiting {
			t.answer = &a
			return false, false, nil
		}
		left := waitPoll
		if c.DeadlineAt > 0 {
			until := time.UnixMilli(c.DeadlineAt).Sub(clock.Now())
			if until <= 0 {
				return true, false, nil
			}
			left = min(left, until)
		}
		if !sleepUntil.IsZero() {
			until := sleepUntil.Sub(clock.Now())
			if until <= 0 {
				return false, true, nil
			}
			left = min(left, until)
		}
		timer := time.NewTimer(left)
		select {
		case <-wake:
		case <-advanced:
		case <-timer.C:
		case <-t.ctx.Done():
			timer.Stop()
			return false, false, fmt.Errorf("wait for tool call %s: %w", c.ToolCallID, context.Cause(t.ctx))
		}
		timer.Stop()
	}
}

// waitingAfter lists the calls of pending that still wait: not consumed,
// and their results not known.
func waitingAfter(pending []store.PendingClientToolCall, results []steps.ToolResult) []string {
	var ids []string
	for _, c := range pending {
		if waits(c, results) {
			ids = append(ids, c.ToolCallID)
		}
	}
	return ids
}

// waits reports whether call c still waits: not consumed, and its result
// not known in results.
func waits(c store.PendingClientToolCall, results []steps.ToolResult) bool {
	return c.ConsumedAt == 0 && (c.Index < 0 || c.Index >= len(results) || results[c.Index].ToolCallID == "")
}

func argsOrEmpty(call helix.ToolCall) []byte {
	if len(call.Arguments) == 0 {
		return []byte(`{}`)
	}
	return call.Arguments
}

func sortInts(s []int) { slices.Sort(s) }

func sortPendingCalls(p []steps.PendingCall) {
	slices.SortFunc(p, func(a, b steps.PendingCall) int { return cmp.Compare(a.Index, b.Index) })
}

func errIndex(c store.PendingClientToolCall, n int) error {
	return fmt.Errorf("pending tool call %s has position %d, but its step has %d calls: the suspended step's record is inconsistent", c.ToolCallID, c.Index, n)
}
