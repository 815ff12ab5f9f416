package steps

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// BeginInput is the input of the begin step.
type BeginInput struct {
	SessionID  string `json:"sessionId"`
	RunID      string `json:"runId"`
	WorkflowID string `json:"workflowId"`
	// Wake numbers the continuation that begins (a run woken from
	// hibernation), 0 for the run's own workflow or a segment.
	Wake int `json:"wake,omitempty"`
}

// BeginRun returns the transaction that starts executing a run: it reads the
// run and its session and performs the durable interrupt check of the first
// step (a set flag ends the run interrupted before any step). A session with
// a suspended step hands the step's record and pending calls to the run.
// A begin that wrote nothing says so (RunInfo.ReadOnly): its record then
// waits for the workflow's next write.
func (e *Env) BeginRun(in BeginInput) dbos.Txn[RunInfo] {
	return func(ctx context.Context, tx dbos.Tx) (RunInfo, error) {
		s := e.InTx(tx)
		run, err := s.GetRun(ctx, in.RunID)
		if err != nil {
			return RunInfo{}, err
		}
		st, err := s.LoadState(ctx, in.SessionID)
		if err != nil {
			return RunInfo{}, err
		}
		info := RunInfo{
			SessionID: st.SessionID, RunID: run.RunID, AgentType: st.AgentType, StreamID: st.StreamID,
			RootSessionID: st.RootSessionID, WorkflowID: in.WorkflowID, Turn: run.Turn,
			PreviousRunID: run.PreviousRunID, StartSequence: run.StartSequence, StartStep: st.StepCount,
			Resumed: isResumeWorkflow(st.SessionID, in.WorkflowID), Parent: parentLink(st),
			Persistent: st.Mode == helix.SessionModePersistent, Trace: st.TracingContext,
		}
		if run.WorkflowID != "" && run.WorkflowID != in.WorkflowID {
			info.Done, info.ReadOnly = ForkRefused(in.WorkflowID, run.RunID, run.WorkflowID), true
			return info, nil
		}
		if in.Wake > 0 {
			if err := postgres.BeginContinuation(ctx, inTx(tx), run.RunID, in.Wake); err != nil {
				return RunInfo{}, err
			}
		}
		if run.Status.Final() {
			info.Done = &Outcome{Status: run.Status, Error: run.Error, Output: st.Output, Steps: run.StepCount}
			info.ReadOnly = in.Wake == 0
			return info, nil
		}
		if len(st.SuspendedStep) > 0 {
			if info.Suspended, err = loadRecord(st.SessionID, st.SuspendedStep, st.SuspendedStepID); err != nil {
				return RunInfo{}, err
			}
			for _, c := range st.PendingClientToolCalls {
				info.Pending = append(info.Pending, c)
			}
			store.SortPendingCalls(info.Pending)
			for _, c := range st.SuspendedAwaitingChildren {
				info.Children = append(info.Children, c)
			}
			slices.SortFunc(info.Children, func(a, b store.SuspendedChildWait) int { return cmp.Compare(a.SubSessionID, b.SubSessionID) })
		}
		if info.Suspended != nil && len(info.Children) > 0 && info.Suspended.RunID == run.RunID {
			if in.Wake > 0 {
				// A continuation of a run that hibernated while its step
				// waited for sub-agents: some may still run, and the step
				// decides once they all ended, as a step waiting in place
				// does (an interrupt included).
				return info, nil
			}
			// A queued run's step that waits for its sub-agents (its
			// segment ended while they ran): interrupted now, the step and
			// its children are kept for the resume, as when the parent
			// waited in place (InterruptForChildren).
			res, err := s.InterruptForChildren(ctx, store.InterruptForChildrenParams{SessionID: st.SessionID, RunID: run.RunID,
				StepID: st.SuspendedStepID, Step: info.Suspended.Step, Record: st.SuspendedStep, Children: st.SuspendedAwaitingChildren,
				Interrupted: interruptedChunk(info, info.Suspended.Step-1, "")})
			if err != nil {
				return RunInfo{}, err
			}
			info.Interrupted = res.Interrupted
			return info, nil
		}
		if !st.InterruptRequested {
			// The session was read in this transaction: no flag, no
			// second read (a flag set since is seen at the next check).
			// A continuation's begin wrote its run's row.
			info.ReadOnly = in.Wake == 0
			return info, nil
		}
		interrupted, err := e.interruptIfRequested(ctx, s, info, st.StepCount, st.CheckpointID)
		info.Interrupted = interrupted
		return info, err
	}
}

// isResumeWorkflow reports a resume run's workflow ID: {sessionId}-resume-{N}.
func isResumeWorkflow(sessionID, workflowID string) bool {
	n, ok := strings.CutPrefix(workflowID, sessionID+"-resume-")
	if !ok || n == "" {
		return false
	}
	_, err := strconv.Atoi(n)
	return err == nil
}

// interruptIfRequested atomically consumes the durable interrupt flag and,
// when it was set, ends the run interrupted.
func (e *Env) interruptIfRequested(ctx context.Context, s *postgres.Store, run RunInfo, step int, checkpointID string) (bool, error) {
	req, err := s.CheckInterruptFlag(ctx, run.SessionID)
	if err != nil || !req.Requested {
		return false, err
	}
	if err := s.UpdateStatus(ctx, run.SessionID, helix.SessionInterrupted, &store.StatusUpdate{
		InterruptContext: &store.InterruptContext{Reason: req.Reason, StepCount: step, Timestamp: nowMS()},
	}); err != nil {
		return false, err
	}
	if err := s.UpdateRunStatus(ctx, run.RunID, helix.RunInterrupted, &store.RunUpdate{StepCount: &step, Error: req.Reason}); err != nil {
		return false, err
	}
	var cp *string
	if checkpointID != "" {
		cp = &checkpointID
	}
	_, err = s.Append(ctx, run.StreamID, []store.ChunkWrite{{RunID: run.RunID, Chunk: &helix.RunInterruptedChunk{
		Base: base(run, step), RunID: run.RunID, CheckpointID: cp, Reason: req.Reason,
	}}})
	return true, err
}

// CommitInput is everything one agent step produced.
type CommitInput struct {
	Run   RunInfo          `json:"run"`
	Step  int              `json:"step"`
	Model helix.StepResult `json:"model"`
	// Tools are the results of the step's tool calls in the model's order
	// (__finish__ included, as the runtime answered it).
	Tools []ToolResult `json:"tools,omitempty"`
	// Complete ends the turn with this step; Output is the structured output
	// (nil without one) and Text the final assistant text.
	Complete bool            `json:"complete,omitempty"`
	Output   json.RawMessage `json:"output,omitempty"`
	Text     string          `json:"text,omitempty"`
	// Nudge, when set, is appended as a user message after the step (the
	// reminder to call __finish__ when the model answered in text only).
	Nudge string `json:"nudge,omitempty"`
	// StepRunID is the run that began the step, when another run finishes
	// it (a fresh resume of a suspended step); usage keys and step IDs
	// keep it. Empty means Run.RunID.
	StepRunID string `json:"stepRunId,omitempty"`
	// Suspended is set when the step waited for human input: the commit
	// also ends the suspension.
	Suspended bool `json:"suspended,omitempty"`
	// MessageCount, when not 0, is the session's message count before the
	// step as this execution's last commit left it: the commit then goes
	// out as one statement with its record (store.StepCommit's
	// ExpectMessageCount), and falls back to locking first when the
	// session changed meanwhile.
	MessageCount int `json:"messageCount,omitempty"`
	// Starts are the step's start chunks when the step held them and
	// nothing wrote them yet (HeldStarts.Take): the commit writes them
	// before its own chunks. Never recorded.
	Starts []helix.Chunk `json:"-"`
}

// stepRunID returns the run that began the step.
func (in CommitInput) stepRunID() string { return cmp.Or(in.StepRunID, in.Run.RunID) }

// CommitOutput reports what the commit wrote.
type CommitOutput struct {
	// CheckpointID is left out of the record a checkpoint carries (its
	// row's key says it).
	CheckpointID string `json:"checkpointId,omitempty"`
	MessageCount int    `json:"messageCount"`
	// Interrupted is set when the interrupt flag was found set after the
	// step: the run ended interrupted in the same transaction.
	Interrupted bool `json:"interrupted,omitempty"`
	// Continued is set when the step asked to complete but messages had
	// arrived in the companion's inbox: they were appended (Inbox) and
	// the run goes on.
	Continued bool            `json:"continued,omitempty"`
	Inbox     []helix.Message `json:"inbox,omitempty"`
}

// CommitStep returns the per-step commit: in one transaction (which also
// records the DBOS step, so a replay never applies it twice) it appends the
// step's messages, applies the tools' state changes (StepPatches),
// writes the checkpoint and counters, records usage, appends the step's
// held start chunks (in.Starts, first) and its closing chunks (tool_end,
// state_patch, step_end, then checkpoint_created, step_committed, output,
// run_interrupted, and stream_end when a root session completes) and
// consumes the interrupt flag for the next step. The store does it in two
// statements (store.StepStore.CommitStep).
func (e *Env) CommitStep(in CommitInput) dbos.Txn[CommitOutput] {
	return func(ctx context.Context, tx dbos.Tx) (CommitOutput, error) {
		run, step := in.Run, in.Step
		c := store.StepCommit{
			SessionID: run.SessionID, RunID: run.RunID, Step: step, AgentType: run.AgentType,
			Messages: StepMessages(in), Complete: in.Complete, EndStream: in.Complete && run.OwnsStream(),
		}
		if in.Complete {
			c.Output = in.Output
		}
		stepID := StepID(in.stepRunID(), step)
		c.ClearSuspension = in.Suspended
		c.Chunks = append(c.Chunks, in.Starts...)
		c.ExpectMessageCount, c.StreamID = in.MessageCount, run.StreamID
		c.ReadInbox = run.Persistent
		if in.Complete && run.Parent != nil {
			c.RefStatus = helix.SubSessionCompleted
		}
		c.Usage = append(c.Usage, store.UsageRecord{
			SourceType: store.UsageModel, SourceName: firstNonEmpty(in.Model.Model, run.AgentType),
			InputTokens: in.Model.Usage.InputTokens, OutputTokens: in.Model.Usage.OutputTokens,
			CachedTokens: in.Model.Usage.CachedTokens, CacheWriteTokens: in.Model.Usage.CacheWriteTokens,
			Success: true, Key: "model:" + stepID,
		})
		for _, r := range in.Tools {
			if helix.IsFinishTool(r.ToolName) || r.Recorded {
				continue
			}
			chunks, usage := resultRecords(run, step, r)
			c.Chunks, c.Usage = append(c.Chunks, chunks...), append(c.Usage, usage...)
		}
		c.Patches = StepPatches(in.Tools)
		if len(c.Patches) > 0 {
			c.Chunks = append(c.Chunks, &helix.StatePatchChunk{Base: base(run, step), Patches: c.Patches})
		}
		u := in.Model.Usage
		c.Chunks = append(c.Chunks, &helix.StepEndChunk{Base: base(run, step), StepID: stepID, Usage: &u,
			FinishReason: in.Model.StopReason.FinishReason()})
		c.Closing = func(cl store.StepClosing) []helix.Chunk {
			out := []helix.Chunk{
				&helix.CheckpointCreatedChunk{Base: base(run, step), RunID: run.RunID, CheckpointID: cl.CheckpointID, StepCount: step},
				&helix.StepCommittedChunk{Base: base(run, step), RunID: run.RunID, StepID: stepID, CheckpointID: cl.CheckpointID},
			}
			if in.Complete && !cl.Continued && len(in.Output) > 0 {
				out = append(out, &helix.OutputChunk{Base: base(run, step), Output: in.Output})
			}
			if in.Complete && !cl.Continued && run.Parent != nil && !run.Persistent {
				out = append(out, subAgentEnd(run, in.Output))
			}
			if cl.Interrupted {
				out = append(out, interruptedChunk(run, step, cl.CheckpointID)(cl.InterruptReason))
			}
			return out
		}
		if record, ok := ctx.Value(commitRecordKey{}).(func(CommitOutput) (string, error)); ok {
			c.Journal = func(res store.StepCommitResult) (string, error) { return record(commitOutput(&res)) }
		}
		res, err := e.InTx(tx).CommitStep(ctx, c)
		if err != nil {
			return CommitOutput{}, err
		}
		for _, w := range res.Warnings {
			e.Log.Warn().Ctx(ctx).Str("event", "state.patch_skipped").Str("sessionId", run.SessionID).Int("step", step).Msg(w)
		}
		return commitOutput(res), nil
	}
}

// commitOutput is the output of a commit that wrote res.
func commitOutput(res *store.StepCommitResult) CommitOutput {
	return CommitOutput{CheckpointID: res.CheckpointID, MessageCount: res.MessageCount, Interrupted: res.Interrupted,
		Continued: res.Continued, Inbox: res.Inbox}
}

type commitRecordKey struct{}

// WithCommitRecord returns ctx with which CommitStep's checkpoint carries
// the step journal's records (store.StepCommit.Journal):
// record renders them, the commit's own included, given the commit's
// output, before the checkpoint is written.
func WithCommitRecord(ctx context.Context, record func(CommitOutput) (string, error)) context.Context {
	return context.WithValue(ctx, commitRecordKey{}, record)
}

// StepPatches returns a step's state changes in the order the tools made
// them: phase 1 (regular tools) in the model's order, then phase 2
// (finishWith tools, which saw phase 1's changes). A failed tool has none.
func StepPatches(results []ToolResult) []helix.PatchOp {
	var out []helix.PatchOp
	for _, phase2 := range []bool{false, true} {
		for _, r := range results {
			if r.FinishWith == phase2 {
				out = append(out, r.Patches...)
			}
		}
	}
	return out
}

// StepMessages returns the messages a step appends: the assistant message,
// one tool-result message per call in the model's order, and the nudge.
func StepMessages(in CommitInput) []helix.Message {
	m := in.Model
	assistant := helix.AssistantMessage(m.Content, m.ToolCalls...)
	assistant.Thinking = m.Thinking
	msgs := []helix.Message{assistant}
	for _, r := range in.Tools {
		content := r.Content()
		if helix.IsFinishTool(r.ToolName) && r.Error == "" {
			content = helix.FinishAck
		}
		msgs = append(msgs, helix.ToolResultMessage(r.ToolCallID, r.ToolName, content))
	}
	if in.Nudge != "" {
		msgs = append(msgs, helix.UserMessage(in.Nudge))
	}
	return msgs
}

// EndInput ends a run without a committed step (a failure).
type EndInput struct {
	Run     RunInfo `json:"run"`
	Step    int     `json:"step"`
	Failure Failure `json:"failure"`
}

// FailRun returns the transaction that fails a run: session and run marked
// failed with the error, an error chunk, and the root stream failed. A
// session that is no longer active (aborted meanwhile) is left as it is and
// the result is false.
func (e *Env) FailRun(in EndInput) dbos.Txn[bool] {
	return func(ctx context.Context, tx dbos.Tx) (bool, error) {
		s := e.InTx(tx)
		run, f := in.Run, in.Failure
		st, err := s.LoadState(ctx, run.SessionID)
		if err != nil {
			return false, err
		}
		if st.Status != helix.SessionActive {
			return false, nil // already ended (aborted): keep that outcome
		}
		if err := s.UpdateStatus(ctx, run.SessionID, helix.SessionFailed, &store.StatusUpdate{Error: f.Message}); err != nil {
			return false, err
		}
		if err := s.ClearInterruptFlag(ctx, run.SessionID); err != nil {
			return false, err
		}
		step := in.Step
		if err := s.UpdateRunStatus(ctx, run.RunID, helix.RunFailed, &store.RunUpdate{StepCount: &step, Error: f.Message, ErrorCode: f.Code}); err != nil {
			return false, err
		}
		if _, err := s.Append(ctx, run.StreamID, []store.ChunkWrite{{RunID: run.RunID, Chunk: &helix.ErrorChunk{
			Base: base(run, in.Step), Error: f.Message, Code: f.Code, Recoverable: f.Recoverable,
		}}}); err != nil {
			return false, err
		}
		if run.Parent != nil {
			if !run.Persistent {
				if _, err := s.Append(ctx, run.StreamID, []store.ChunkWrite{{RunID: run.RunID,
					Chunk: subAgentEnd(run, errorResult(f.Message))}}); err != nil {
					return false, err
				}
			}
			if err := s.UpdateSubSessionRef(ctx, run.Parent.SessionID, store.SubSessionRefUpdate{
				SubSessionID: run.SessionID, Status: ptr(helix.SubSessionFailed)}); err != nil {
				return false, err
			}
		}
		if run.OwnsStream() {
			if err := s.FailStream(ctx, run.StreamID, f.Message); err != nil {
				return false, fmt.Errorf("fail stream: %w", err)
			}
		}
		return true, nil
	}
}

// ForkRefused is the outcome of a workflow that is a copy of a run's
// workflow made with DBOS's tools (ForkWorkflow, `dbos workflow fork`): it
// runs nothing, and the session is left as it was.
func ForkRefused(workflowID, runID, runWorkflowID string) *Outcome {
	return &Outcome{Status: helix.RunFailed, Code: helix.CodeInternal, Error: fmt.Sprintf(
		"workflow %s is a copy of workflow %s of run %s (a DBOS fork): it runs nothing and leaves the session as it was; "+
			"to run a session again from a checkpoint use helix-dbos retry (or Engine.Retry, which can branch into a new session)",
		workflowID, runWorkflowID, runID)}
}
