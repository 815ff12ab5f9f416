package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// TurnName is the registered name of the agent-turn workflow. The version
// suffix changes only with an incompatible change of the body.
const TurnName = "helix.agent_turn.v2"

// NudgeFinish is appended as a user message when an agent with an output
// schema answers in text only.
const NudgeFinish = "Deliver your final answer by calling the " + helix.FinishToolName + " tool with arguments matching its schema."

// retries makes the DBOS steps of a queued run's driver ride out short
// infrastructure outages (the journal's steps retry the same way).
var retries = dbos.WithStepMaxRetries(steps.InfraRetries)

// TurnInput identifies the run a turn workflow executes; everything else is
// read from the run record in the first step, so a run can be started (or
// restarted after a crash) from its record alone.
type TurnInput struct {
	SessionID string `json:"sessionId"`
	RunID     string `json:"runId"`
	// Queue, on a run admitted through a queue, makes this workflow the
	// run's driver: it runs none of the run's steps itself but enqueues
	// them as segments (see drive). nil runs the run in this workflow.
	Queue *Admission `json:"queue,omitempty"`
	// Segment numbers a segment (1, 2, …) of the run whose driver's
	// workflow ID is Driver; 0 for a driver or a run without a queue.
	// A driver's own Driver is its workflow ID: a copy of it (a DBOS
	// fork, under another ID) runs nothing.
	Segment int    `json:"segment,omitempty"`
	Driver  string `json:"driver,omitempty"`
	// ReportTo, on a segment enqueued by a continuation of its hibernated
	// driver, is that continuation's workflow ID: the segment reports its
	// outcome there ("" reports to Driver).
	ReportTo string `json:"reportTo,omitempty"`
	// TimedOut names the call whose wait the driver ended at its deadline;
	// Received the calls whose messages (answers, or wake-ups) the driver
	// took since the last segment.
	TimedOut string   `json:"timedOut,omitempty"`
	Received []string `json:"received,omitempty"`
	// ChildOutcomes are the outcomes of the sub-agents the previous
	// segment's step waits for, by tool call ID (taken by the driver).
	ChildOutcomes map[string]steps.Outcome `json:"childOutcomes,omitempty"`
	// Notify, on a sub-agent's queued run, is where its driver reports the
	// run's outcome: its parent run's driver, on a topic of its own.
	Notify *ChildNotify `json:"notify,omitempty"`
	// Wake numbers a continuation (1, 2, …) of the run whose workflow ID
	// is Origin: the run hibernated while it waited for people and was
	// woken (see hibernate); 0 for any other workflow.
	Wake   int    `json:"wake,omitempty"`
	Origin string `json:"origin,omitempty"`
	// Live, on a sub-agent's run, says that its parent waits for its
	// workflow in place (the parent cannot hibernate: a queued run's
	// segment, a companion's run): the run does not hibernate either, nor
	// do its own sub-agents.
	Live bool `json:"live,omitempty"`
}

// WakeID is the workflow ID of continuation n (1, 2, …) of the run whose
// workflow is origin (helix.wake_workflow_id in SQL).
func WakeID(origin string, n int) string { return store.WakeWorkflowID(origin, n) }

// ChildNotify is where a sub-agent's queued run reports its outcome.
type ChildNotify struct {
	Driver string `json:"driver"`
	Topic  string `json:"topic"`
}

// Register registers the workflows on a DBOS context (before Launch).
func Register(ctx dbos.Context, env *steps.Env) {
	dbos.RegisterWorkflow(ctx, Turn(env), dbos.WithWorkflowName(TurnName))
}

// Turn returns the agent-turn workflow: one run of a session, step after
// step, until the agent completes, fails, is interrupted or exhausts its
// step budget.
func Turn(env *steps.Env) dbos.Workflow[TurnInput, steps.Outcome] {
	var self dbos.Workflow[TurnInput, steps.Outcome]
	self = func(ctx dbos.Context, in TurnInput) (result steps.Outcome, resultErr error) {
		// When this execution began, for its run span (not workflow
		// state: tracing records nothing).
		began := time.Now()
		// A persistent companion's run publishes its outcome as a DBOS
		// event, which a parent's waitForResult waits on.
		persistent := false
		// The journal of this execution's steps (opened once the run is
		// known to have steps to run). Records still waiting for a write
		// are written before the run reports its outcome through DBOS.
		var j *journal
		flushed := func(err error) error {
			if err != nil || j == nil {
				return err
			}
			return j.flush(ctx)
		}
		defer func() {
			// A run that hibernated did not end: the continuation that
			// ends it sets the event on its own workflow.
			if resultErr == nil && persistent && !result.Hibernated {
				if resultErr = flushed(nil); resultErr == nil {
					resultErr = dbos.SetEvent(ctx, steps.OutcomeEvent, result)
				}
			}
		}()
		wfID, err := dbos.GetWorkflowID(ctx)
		if err != nil {
			return steps.Outcome{}, err
		}
		// The run's workflow: this one, or a segment's driver.
		runWF := wfID
		if in.Segment > 0 {
			if want := SegmentID(in.Driver, in.Segment); wfID != want {
				// A DBOS fork of a segment.
				return *steps.ForkRefused(wfID, in.RunID, want), nil
			}
			runWF = in.Driver
		}
		if in.Wake > 0 {
			if want := WakeID(in.Origin, in.Wake); wfID != want {
				// A DBOS fork of a continuation.
				return *steps.ForkRefused(wfID, in.RunID, want), nil
			}
			runWF = in.Origin
		}
		if env.Revive != nil && in.Wake == 0 {
			// A workflow resumed with DBOS's tools after its session was
			// aborted runs its session again (a fork's copy does not, nor
			// does a continuation, which may have been started after the
			// abort: Revive would take it for a copy, so it is not asked).
			if err := env.Revive(ctx, in.SessionID, in.RunID, runWF); err != nil {
				return steps.Outcome{}, err
			}
		}
		if in.Queue != nil && in.Segment == 0 {
			return drive(ctx, env, self, in, wfID)
		}
		if in.Segment > 0 {
			defer func() {
				if resultErr = flushed(resultErr); resultErr == nil {
					resultErr = report(ctx, in, result)
				}
			}()
		}
		// The fencing ticket of this execution: its step bodies act only
		// while this process still owns the session (not workflow state:
		// it changes no step and is never recorded). Its owner token, the
		// one DBOS gave it (executionOwner), fences its records and its
		// stream writes in the database itself (RunInfo.StreamFence).
		owner, err := executionOwner(ctx)
		if err != nil {
			return steps.Outcome{}, err
		}
		ticket := steps.Ticket{WorkflowID: wfID, Owner: owner}
		if env.Fence != nil {
			if ticket, err = env.Fence.Acquire(ctx, wfID, owner); err != nil {
				return steps.Outcome{}, err
			}
			defer env.Fence.Release(ticket)
		}
		// The journal of this execution's steps, the run's begin first. A
		// continuation's commits carry its records under its number (a run
		// that hibernates is not a queued run's segment); the run's turn,
		// which its model records name, is known once it began.
		if j, err = openJournal(ctx, env.Store, env.Log, wfID, owner,
			journalScope{sessionID: in.SessionID, runID: in.RunID, segment: max(in.Segment, in.Wake)}); err != nil {
			return steps.Outcome{}, err
		}
		// A begin transaction that does not run here was recorded by an
		// earlier execution: this one recovers the run.
		implied := impliedRun{sessionID: in.SessionID, runID: in.RunID, workflowID: runWF}
		run, err := runTxn(ctx, j, steps.NameBeginRun,
			implied.record(env.BeginRun(steps.BeginInput{SessionID: in.SessionID, RunID: in.RunID, WorkflowID: runWF, Wake: in.Wake})))
		if err != nil {
			return steps.Outcome{}, err
		}
		implied.restore(&run)
		beganHere := j.ran
		defer env.Forget(run.SessionID)
		run.Ticket = ticket
		persistent = run.Persistent
		if run.Done != nil {
			return *run.Done, nil
		}
		j.scope.turn = run.Turn
		susp, pending, children := run.Suspended, run.Pending, run.Children
		run.Suspended, run.Pending, run.Children = nil, nil, nil
		t := &turn{ctx: ctx, env: env, j: j, run: run, hooks: env.HasHooks(run.AgentType), self: self,
			segment: in.Segment, wake: in.Wake, reportTo: reportTo(in), adm: in.Queue, timedOut: in.TimedOut, received: in.Received,
			childOutcomes: in.ChildOutcomes, live: in.Live, begunHere: beganHere}
		t.startRun(began, in, !beganHere)
		defer func() { t.endRun(result, resultErr) }()
		if run.Interrupted {
			return t.interrupted(run.StartStep, "interrupted before the first step")
		}
		def, err := env.Agent(run.AgentType)
		if err != nil {
			return t.fail(run.StartStep, steps.Failure{Message: err.Error(), Code: helix.CodeInternal})
		}
		t.def = def
		if len(def.Agent.ToolSources) > 0 {
			// The run's tools from its agent's sources: listed once per run
			// (a resume finishing another run's suspended step keeps that
			// run's), the same for every execution of it.
			in := steps.PinToolsInput{Run: run}
			if susp != nil && susp.RunID != run.RunID {
				in.From = susp.RunID
			}
			pinned, err := runStep(ctx, j, steps.NamePinTools, recordLater, env.PinTools(in))
			if err != nil {
				return t.infraFailure(run.StartStep, err)
			}
			if t.def, err = def.WithSourceTools(pinned); err != nil {
				return t.fail(run.StartStep, steps.Failure{Message: err.Error(), Code: helix.CodeInternal})
			}
			t.run.Def = t.def
		}
		// A run's later segments and its continuations continue it: its
		// start hooks fired in the first.
		first := in.Segment <= 1 && in.Wake == 0
		if first {
			if err := t.fire(run.StartStep, steps.HookEvent{Kind: steps.HookAgentStart}); err != nil {
				return steps.Outcome{}, err
			}
		}
		if first && run.Resumed {
			if err := t.fire(run.StartStep, steps.HookEvent{Kind: steps.HookAgentResumed, PreviousRunID: run.PreviousRunID}); err != nil {
				return steps.Outcome{}, err
			}
		}
		step := run.StartStep + 1
		if susp != nil {
			// A fresh resume of a step suspended on human input, or
			// stopped with sub-agents in flight: finish that step first.
			var own []store.PendingClientToolCall
			for _, c := range pending {
				if c.Step == susp.Step {
					own = append(own, c)
				}
			}
			var out steps.Outcome
			var done bool
			var err error
			out, done, err = t.traceStep(susp.Step, func() (steps.Outcome, bool, error) {
				if len(children) > 0 {
					return t.resumeStopped(*susp, children)
				}
				// A later segment continues in place a suspension of its
				// own run (its driver waited for the answer); a resume run
				// fired OnAgentResumed at its start.
				return t.await(*susp, own, !first && susp.RunID == run.RunID)
			})
			if err != nil {
				return t.infraFailure(susp.Step-1, err)
			}
			if done {
				return out, nil
			}
			step = susp.Step + 1
		}
		maxSteps := def.Agent.EffectiveMaxSteps()
		for ; ; step++ {
			if step > maxSteps {
				return t.fail(step-1, steps.Failure{Code: helix.CodeMaxStepsExceeded, Message: fmt.Sprintf(
					"agent %q used all %d steps of this turn without finishing; raise Agent.MaxSteps, or check that its prompt and tools let it finish",
					def.Agent.Name, maxSteps)})
			}
			out, done, err := t.traceStep(step, func() (steps.Outcome, bool, error) { return t.step(step) })
			if err != nil {
				return t.infraFailure(step-1, err)
			}
			if done {
				return out, nil
			}
		}
	}
	return self
}

// turn is the state of one workflow execution.
type turn struct {
	ctx   dbos.Context
	env   *steps.Env
	j     *journal
	run   steps.RunInfo
	def   *steps.AgentDef
	hooks bool
	// self is the turn workflow, which sub-agents run as child workflows.
	self dbos.Workflow[TurnInput, steps.Outcome]
	// segment numbers this execution when it is a segment of a queued run
	// (0 otherwise): a call it would wait for ends it, with the call in
	// its outcome, for its driver to wait for.
	segment int
	// wake numbers the continuation this execution runs (0: the run's own
	// workflow, or a segment).
	wake int
	// reportTo is the workflow a segment reports to (its driver's, or a
	// continuation's of it), which its queued sub-agents report to too.
	reportTo string
	// timedOut names the call whose wait the driver ended at its deadline;
	// received the calls whose messages the driver took (each is resolved
	// once on its account).
	timedOut string
	received []string
	// adm is a segment's admission, which its sub-agents' runs take.
	adm *Admission
	// live: a sub-agent's run whose parent waits for its workflow in place
	// (TurnInput.Live).
	live bool
	// begunHere: the run's begin ran in this execution, so what it read
	// (no interrupt requested, the pending calls' answers) is this
	// execution's, not a recorded execution's.
	begunHere bool
	// childOutcomes are the outcomes of the sub-agents a segment's step
	// waits for, taken by its driver.
	childOutcomes map[string]steps.Outcome
	// messageCount is the session's message count after this execution's
	// last commit, 0 when the next step must read the session; between a
	// step's model call and its commit, the count the model call read,
	// which the commit expects to find (steps.CommitInput.MessageCount).
	messageCount int
	// answer is what the last wait for a call read when it ended (nil when
	// it did not read: a replay, or a deadline).
	answer *postgres.Answer
	// starts are the running step's held start chunks (holdsStarts; nil
	// when it holds none).
	starts *steps.HeldStarts
	// tr is the execution's tracing state (a side channel).
	tr runTrace
}

// step runs one agent step; done reports that the run ended.
func (t *turn) step(step int) (steps.Outcome, bool, error) {
	if err := t.deliverCompletions(); err != nil {
		return steps.Outcome{}, true, err
	}
	// The step's own chunks, when the model streamed nothing, commit with
	// its record (the step's first write), or are held for its commit
	// (holdsStarts).
	var closing, held []helix.Chunk
	// row is the model record written as the step's assistant message
	// row, when it was.
	var row *modelRow
	m, err := runStepWith(t.ctx, t.j, steps.NameCallModel, recordNow,
		fenced(t, t.env.CallModel(steps.ModelInput{Run: t.run, Step: step, MessageCount: t.messageCount}, &closing)),
		stepWrites[steps.ModelOutput]{
			with: func(m steps.ModelOutput) streamAppend {
				if t.holdsStarts(m) {
					// The replay below restores them.
					held = closing
					return streamAppend{}
				}
				return streamAppend{stream: t.run.StreamID, chunks: steps.ChunkWrites(t.run.RunID, closing)}
			},
			later: t.nothingRunsBeforeTheNextWrite,
			row: func(m steps.ModelOutput, rec journalRecord) (*modelRow, error) {
				r, ok, err := newModelRow(t.j.scope.turn, t.j.scope.segment, rec, m)
				if ok {
					row = r
				}
				return row, err
			},
		})
	if err != nil {
		return steps.Outcome{}, true, err
	}
	replayed := !t.j.ran
	switch {
	case row != nil && row.found:
		// The tools run with the arguments as stored, which a replay
		// reads back.
		m.Result.ToolCalls = storedArguments(row.stored)
	case row != nil || replayed:
		// As a replay of the record's helix.step_journal form reads them
		// (a no-op for a record json.Marshal wrote).
		m.Result.ToolCalls = storedArguments(m.Result.ToolCalls)
	}
	if m.Failure != nil {
		out, err := t.fail(step-1, *m.Failure)
		return out, true, err
	}
	if err := t.env.CallProbe(t.ctx, steps.ProbeInfo{Point: steps.ProbeAfterModelCall, SessionID: t.run.SessionID,
		RunID: t.run.RunID, Step: step}); err != nil {
		return steps.Outcome{}, true, err
	}
	switch {
	case held != nil:
		t.starts = t.env.HoldStarts(t.ctx, t.run, step, held)
		defer func() { t.starts.Stop(); t.starts = nil }()
	case replayed && t.holdsStarts(m) && t.j.replaysOnly(steps.NameRunTool):
		// The lost execution recorded the model call but not the step's
		// commit: its start chunks may not have been written.
		if _, err := execute(t.ctx, steps.NameRestoreStarts, fenced(t,
			t.env.RestoreStarts(t.run, step, steps.StartChunks(t.run, step, t.def, m.Result)))); err != nil {
			return steps.Outcome{}, true, err
		}
	}
	if t.messageCount == 0 {
		t.messageCount = m.MessageCount
	}
	res := m.Result
	results := make([]steps.ToolResult, len(res.ToolCalls))
	p, err := t.plan(step, res.ToolCalls)
	if err != nil {
		return steps.Outcome{}, true, err
	}
	// Phase 1: regular tools and sub-agents in parallel, each tool a step
	// and each sub-agent a child workflow with a deterministic ID. A
	// segment of a queued run whose step has sub-agents (and no companion
	// call) runs them as queued runs of their own and ends once its tools
	// ran: its driver waits for them, holding no slot.
	if t.segment > 0 && len(p.subs) > 0 && len(p.comps) == 0 {
		return t.detachChildren(step, res, p, results)
	}
	stopped, asleep, err := t.runPhase1(step, res.ToolCalls, p.phase1, p.subs, results, t.joinsCommit(res.ToolCalls, p))
	if err != nil {
		return steps.Outcome{}, true, err
	}
	waits, sleeping := t.childWaits(res.ToolCalls, stopped), t.childWaits(res.ToolCalls, asleep)
	if len(p.comps) > 0 {
		more, dormant, err := t.runCompanions(step, res.ToolCalls, p.comps, results)
		if err != nil {
			return steps.Outcome{}, true, err
		}
		waits, sleeping = append(waits, more...), append(sleeping, dormant...)
	}
	if len(sleeping) > 0 {
		// Sub-agents or companions that hibernated: the step waits for
		// them asleep too.
		out, err := t.hibernateForChildren(step, res, results, waits, sleeping)
		return out, true, err
	}
	if len(waits) > 0 {
		if out, done, err := t.stopForChildren(step, res, results, waits); done || err != nil {
			return out, true, err
		}
	}
	if len(p.pending) > 0 {
		return t.suspend(step, res, results, p.pending)
	}
	return t.finish(step, res, results, "", false)
}

// nothingRunsBeforeTheNextWrite reports a model step whose record (and
// chunks) can wait for the step's next write: its calls run no code of the
// application before the step's commit or suspension records it (a text
// answer, __finish__, client-executed tools and calls that always need
// approval), so a crash before that write loses nothing but the model call.
func (t *turn) nothingRunsBeforeTheNextWrite(m steps.ModelOutput) bool {
	if m.Failure != nil || t.def == nil {
		return false
	}
	for _, call := range m.Result.ToolCalls {
		if helix.IsFinishTool(call.Name) {
			continue
		}
		tool, known := t.def.Tools[call.Name]
		if !known || tool.SubAgent() != nil || tool.IsCompanion() || tool.IsFinishWith() ||
			tool.ValidateArguments(argsOrEmpty(call)) != nil {
			return false
		}
		if !tool.ExecutesOnClient() && (!tool.NeedsApprovalCheck() || tool.HasApprovalPredicate()) {
			return false
		}
	}
	return true
}

// holdsStarts reports a model step whose start chunks (step_start and its
// tool_starts) are held for the step's commit when the model streamed
// nothing, instead of written with its record (steps.HeldStarts): a step
// whose record is written at once (its tools run application code) and
// whose calls all run as in-process tools, so nothing but the tools' events
// (which write the held chunks first) reaches the stream before the
// commit. Sub-agents and companions write into the stream, client tools
// and approvals suspend the step: those steps write them with the record.
// It depends on the step alone: a replay of such a step restores them
// (RestoreStarts, which writes them only when the stream holds nothing of
// the step).
func (t *turn) holdsStarts(m steps.ModelOutput) bool {
	if m.Failure != nil || t.def == nil || t.nothingRunsBeforeTheNextWrite(m) {
		return false
	}
	for _, call := range m.Result.ToolCalls {
		tool, known := t.def.Tools[call.Name]
		if known && (tool.SubAgent() != nil || tool.IsCompanion() || tool.ExecutesOnClient() || tool.NeedsApprovalCheck()) {
			return false
		}
	}
	return true
}

// classify sorts a step's calls: __finish__ (finish, -1 for none), the
// finishWith tools of phase 2, and the rest in the model's order.
func (t *turn) classify(calls []helix.ToolCall) (finish int, phase2, rest []int) {
	finish = -1
	for i, call := range calls {
		switch tool, known := t.def.Tools[call.Name]; {
		case helix.IsFinishTool(call.Name):
			finish = i
		case known && tool.IsFinishWith():
			phase2 = append(phase2, i)
		default:
			rest = append(rest, i)
		}
	}
	return finish, phase2, rest
}

// finish runs the rest of a step whose regular tools have their results
// (phase 2, __finish__, the commit and the hooks). stepRunID names the run
// that began the step when another run finishes it; suspended marks a step
// that waited for human input.
func (t *turn) finish(step int, res helix.StepResult, results []steps.ToolResult, stepRunID string, suspended bool) (steps.Outcome, bool, error) {
	ctx, env, run := t.ctx, t.env, t.run
	in := steps.CommitInput{Run: run, Step: step, Model: res, StepRunID: stepRunID, Suspended: suspended,
		MessageCount: t.messageCount}
	finish, phase2, _ := t.classify(res.ToolCalls)
	// Phase 2: finishWith tools, sequentially, seeing the state changes
	// made before them in the step, in the model's order.
	staged := steps.StepPatches(results)
	for k, i := range phase2 {
		// The last one is recorded with the commit; earlier ones at once
		// (a tool that completed is never run again).
		mode := recordNow
		if k == len(phase2)-1 {
			mode = recordLater
		}
		r, err := t.runToolStep(mode, steps.ToolInput{Run: run, Step: step, Call: res.ToolCalls[i], Staged: staged, Starts: t.starts})
		if err != nil {
			return steps.Outcome{}, true, err
		}
		results[i] = r
		staged = append(staged, r.Patches...)
		if r.FinishWith && r.Error == "" && !in.Complete {
			in.Complete, in.Output = true, r.Result
		}
	}
	// __finish__: structured output validated against the output schema;
	// an invalid output goes back to the model as a tool error.
	if finish >= 0 {
		call := res.ToolCalls[finish]
		r := steps.ToolResult{ToolCallID: call.ID, ToolName: call.Name}
		if err := t.validateOutput(call.Arguments); err != nil {
			r.Error, r.ErrorCode = err.Error(), steps.CodeInvalidArguments
		} else if !in.Complete {
			in.Complete, in.Output = true, call.Arguments
		}
		results[finish] = r
	}
	in.Tools = results
	if len(res.ToolCalls) == 0 {
		if t.def.Output != nil {
			in.Nudge = NudgeFinish
		} else {
			in.Complete = true
		}
	}
	if !in.Complete && t.def.Agent.StopWhen != nil && t.def.Agent.StopWhen(res) {
		in.Complete = true
	}
	in.Text = res.Content
	if in.Complete && len(in.Output) == 0 && t.def.Output == nil {
		in.Output, _ = json.Marshal(res.Content)
	}
	if t.starts != nil {
		// The start chunks nothing wrote yet go first in the commit.
		var err error
		if in.Starts, err = execute(ctx, steps.NameTakeStarts, t.starts.Take()); err != nil {
			return steps.Outcome{}, true, err
		}
	}
	joined := t.j.call
	if joined != nil && len(in.Starts) > 0 {
		// The call that runs in the commit's transaction writes its
		// events before the commit's own chunks: the start chunks go out
		// first in that transaction, with the call's first statement.
		t.j.appends = append(t.j.appends, streamAppend{stream: run.StreamID, chunks: steps.ChunkWrites(run.RunID, in.Starts)})
		in.Starts = nil
	}
	// A joined call stores its result in results (in.Tools) in the
	// commit's transaction, before the commit's body reads it.
	c, err := runTxn(ctx, t.j, steps.NameCommitStep, env.CommitStep(in))
	if err != nil {
		return steps.Outcome{}, true, err
	}
	if joined != nil {
		if err := env.CallProbe(ctx, steps.ProbeInfo{Point: steps.ProbeAfterToolCommit, SessionID: run.SessionID,
			RunID: run.RunID, Step: step, ToolCallID: joined.call.ID, ToolName: joined.call.Name}); err != nil {
			return steps.Outcome{}, true, err
		}
	}
	// The next step starts from what this commit wrote, when it was
	// written by this execution (after a replay, the next step reads the
	// session and checks for a lost attempt's trace).
	t.messageCount = 0
	if t.j.ran {
		t.messageCount = c.MessageCount
	}
	// The committed messages join this process's copy of the log, so the
	// next step reads none of them back (a pure cache update: replays
	// write the same messages at the same positions).
	env.Remember(run.SessionID, c.MessageCount, append(steps.StepMessages(in), c.Inbox...))
	if err := env.CallProbe(ctx, steps.ProbeInfo{Point: steps.ProbeAfterCommit, SessionID: run.SessionID,
		RunID: run.RunID, Step: step}); err != nil {
		return steps.Outcome{}, true, err
	}
	if err := t.fire(step, stepEvents(in)...); err != nil {
		return steps.Outcome{}, true, err
	}
	switch {
	case in.Complete && !c.Continued:
		out := steps.Outcome{Status: helix.RunCompleted, Output: in.Output, Text: in.Text, Steps: step}
		result := helix.AgentResult{SessionID: run.SessionID, RunID: run.RunID, Status: helix.AgentCompleted, Output: in.Output}
		return out, true, t.fire(step, steps.HookEvent{Kind: steps.HookAgentComplete, Result: &result})
	case c.Interrupted:
		out, err := t.interrupted(step, "")
		return out, true, err
	}
	return steps.Outcome{}, false, nil
}

// runPhase1 runs the tool calls at tools as tool steps and the sub-agent
// calls at subs as child workflows, all in parallel, and stores their results
// at the same indexes. Step IDs are taken in a fixed order (the dispatches,
// the children, the tools, then the awaits), so a replay finds each one.
// joins runs the lone transactional call in the step's commit (joinsCommit):
// its result is stored there.
func (t *turn) runPhase1(step int, calls []helix.ToolCall, tools, subs []int, results []steps.ToolResult,
	joins bool) (stopped, asleep []int, err error) {
	input := func(i int) steps.ToolInput {
		return steps.ToolInput{Run: t.run, Step: step, Call: calls[i], Starts: t.starts}
	}
	if joins {
		return nil, nil, t.joinCommit(input(tools[0]), &results[tools[0]])
	}
	if len(tools) == 1 && len(subs) == 0 {
		// A lone call runs without the goroutine hand-off.
		r, err := t.runToolStep(recordLater, input(tools[0]))
		results[tools[0]] = r
		return nil, nil, err
	}
	children, err := t.startChildren(step, calls, subs, results, false)
	if err != nil {
		return nil, nil, err
	}
	if err := t.runTools(step, calls, tools, results); err != nil {
		return nil, nil, err
	}
	return t.awaitChildren(calls, children, results)
}

// runTools runs the tool calls at tools in parallel, each a journal step,
// and stores their results at the same indexes. Step IDs are taken in the
// calls' order before any runs. Each tool is recorded as soon as it ends,
// while the others run (a tool that completed is never run again); the last
// to end is recorded with the step's commit.
func (t *turn) runTools(step int, calls []helix.ToolCall, tools []int, results []steps.ToolResult) error {
	type done struct {
		k   int
		err error
		// recorded: a transactional tool's call, recorded in its own
		// transaction (runTxTool).
		recorded bool
	}
	ids := make([]int, len(tools))
	errs := make([]error, len(tools))
	started := time.Now()
	ended := make(chan done, len(tools))
	running := 0
	for k, i := range tools {
		ids[k] = t.j.reserve()
		rec, ok, err := t.j.recorded(ids[k], steps.NameRunTool)
		switch {
		case err != nil:
			return err
		case ok:
			results[i], errs[k] = decode[steps.ToolResult](rec)
			continue
		}
		running++
		in := steps.ToolInput{Run: t.run, Step: step, Call: calls[i], Starts: t.starts}
		if tool := t.txTool(calls[i]); tool != nil {
			id := ids[k]
			go func() {
				r, err := t.runTxTool(id, tool, in)
				results[i] = r
				ended <- done{k, err, true}
			}()
			continue
		}
		fn := fenced(t, t.env.RunTool(in))
		go func() {
			r, err := execute(t.ctx, steps.NameRunTool, fn)
			results[i] = r
			ended <- done{k, err, false}
		}()
	}
	for n := 1; n <= running; n++ {
		d := <-ended
		if d.recorded {
			errs[d.k] = d.err
			continue
		}
		mode := recordNow
		if n == running {
			mode = recordLater
		}
		errs[d.k] = t.j.record(t.ctx, ids[d.k], steps.NameRunTool, mode, results[tools[d.k]], d.err, started)
	}
	return errors.Join(errs...)
}

func (t *turn) validateOutput(args json.RawMessage) error {
	if t.def.Output == nil {
		return fmt.Errorf("agent %q has no output schema: %s is not available", t.def.Agent.Name, helix.FinishToolName)
	}
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	return t.def.Output.Validate("output of "+helix.FinishToolName, args)
}

// infraFailure ends the run failed after a step failed for good (its
// retries exhausted), so the session does not stay active with no workflow:
// it can be retried. A cancelled workflow (shutdown, abort) returns the
// error instead: its steps are not recorded and recovery re-runs them.
func (t *turn) infraFailure(step int, cause error) (steps.Outcome, error) {
	if t.ctx.Err() != nil {
		return steps.Outcome{}, cause
	}
	if errors.Is(cause, dbos.ErrConflictingWorkflowID) {
		// Fenced: another engine took the session over (this process's
		// lease expired) or it was cancelled. Nothing of this execution is
		// recorded from now on; DBOS waits for the owner's outcome.
		t.env.Log.Error().Ctx(t.logCtx()).Str("event", "run.taken_over").Str("sessionId", t.run.SessionID).Str("runId", t.run.RunID).
			Int("step", step+1).Err(cause).
			Msg("this process no longer owns the session (taken over by another engine after its executor lease expired, or cancelled): it stops the session's loop here and records nothing; the owner continues it")
		return steps.Outcome{}, cause
	}
	t.env.Log.Error().Ctx(t.logCtx()).Str("event", "run.step_failed").Str("sessionId", t.run.SessionID).Str("runId", t.run.RunID).
		Int("step", step+1).Err(cause).Msg("a step failed after its retries; failing the run")
	out, err := t.fail(step, steps.Failure{Code: helix.CodeInternal, Message: fmt.Sprintf(
		"step %d failed: %v; the session can be run again with Retry", step+1, cause)})
	if err != nil {
		return steps.Outcome{}, errors.Join(cause, err)
	}
	return out, nil
}

// fail ends the run failed.
func (t *turn) fail(step int, f steps.Failure) (steps.Outcome, error) {
	if _, err := runTxn(t.ctx, t.j, steps.NameEndRun, t.env.FailRun(steps.EndInput{Run: t.run, Step: step, Failure: f})); err != nil {
		return steps.Outcome{}, err
	}
	if err := t.fire(step, steps.HookEvent{Kind: steps.HookAgentFail, Reason: f.Message}); err != nil {
		return steps.Outcome{}, err
	}
	return steps.Outcome{Status: helix.RunFailed, Error: f.Message, Code: f.Code, Steps: step}, nil
}

// interrupted reports a run ended by the interrupt flag (already written).
func (t *turn) interrupted(step int, reason string) (steps.Outcome, error) {
	if t.def != nil || t.hooks {
		if err := t.fire(step, steps.HookEvent{Kind: steps.HookAgentInterrupted, Reason: reason}); err != nil {
			return steps.Outcome{}, err
		}
	}
	return steps.Outcome{Status: helix.RunInterrupted, Error: reason, Steps: step}, nil
}

// fire runs the hook step when the agent has hooks.
func (t *turn) fire(step int, events ...steps.HookEvent) error {
	if !t.hooks || len(events) == 0 {
		return nil
	}
	_, err := runStep(t.ctx, t.j, steps.NameFireHooks, recordLater,
		fenced(t, t.env.FireHooks(steps.HooksInput{Run: t.run, Step: step, Events: events})))
	return err
}

// stepEvents lists a committed step's hooks in the canonical order:
// onMessage for the assistant message, then for each tool call its
// onMessage and afterTool (beforeTool and onStateChange fired inside the
// tool's step), then onStepEnd.
func stepEvents(in steps.CommitInput) []steps.HookEvent {
	msgs := steps.StepMessages(in)
	events := []steps.HookEvent{{Kind: steps.HookMessage, Message: &msgs[0]}}
	for i, r := range in.Tools {
		call := in.Model.ToolCalls[i]
		events = append(events, steps.HookEvent{Kind: steps.HookMessage, Message: &msgs[i+1]})
		if helix.IsFinishTool(r.ToolName) || r.Denied {
			continue // a denied call never ran: no AfterTool
		}
		outcome := helix.ToolOutcome{Result: r.Result, Error: r.Error, Duration: msDuration(r.DurationMS)}
		events = append(events, steps.HookEvent{Kind: steps.HookAfterTool, Call: &call, Outcome: &outcome})
	}
	res := in.Model
	return append(events, steps.HookEvent{Kind: steps.HookStepEnd, Step: &res})
}

// fenced wraps a step body so that it runs only while this process owns
// the run's session (Env.Fence): a zombie's step fails with a fencing error
// instead of acting a second time.
func fenced[R any](t *turn, fn dbos.Step[R]) dbos.Step[R] {
	fn = traced(t, fn)
	if t.env.Fence == nil {
		return fn
	}
	ticket := t.run.Ticket
	return func(ctx context.Context) (R, error) {
		if err := t.env.Fence.Check(ctx, ticket); err != nil {
			var zero R
			return zero, err
		}
		return fn(ctx)
	}
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// impliedRun is what a turn workflow's input says of the run its begin
// reads: its session, its ID and its workflow (the run's own, which a
// segment or a continuation names by its driver or origin). The begin's
// record leaves those out, and a root session's stream and root, which are
// the session itself: a hibernated session keeps the record (about 160
// bytes less each).
type impliedRun struct {
	sessionID, runID, workflowID string
}

// record wraps the begin so that its output, the record, leaves out what
// the input implies (restore puts it back, on the first execution as on a
// replay).
func (im impliedRun) record(begin dbos.Txn[steps.RunInfo]) dbos.Txn[steps.RunInfo] {
	return func(ctx context.Context, tx dbos.Tx) (steps.RunInfo, error) {
		run, err := begin(ctx, tx)
		if err != nil {
			return run, err
		}
		steps.LeaveOut(&run.StreamID, run.SessionID)
		steps.LeaveOut(&run.RootSessionID, run.SessionID)
		steps.LeaveOut(&run.SessionID, im.sessionID)
		steps.LeaveOut(&run.RunID, im.runID)
		steps.LeaveOut(&run.WorkflowID, im.workflowID)
		return run, nil
	}
}

// restore fills in what record left out.
func (im impliedRun) restore(run *steps.RunInfo) {
	steps.PutBack(&run.SessionID, im.sessionID)
	steps.PutBack(&run.RunID, im.runID)
	steps.PutBack(&run.WorkflowID, im.workflowID)
	steps.PutBack(&run.StreamID, run.SessionID)
	steps.PutBack(&run.RootSessionID, run.SessionID)
}
