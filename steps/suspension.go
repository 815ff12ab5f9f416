package steps

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/recv"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// Step names of human-in-the-loop steps.
const (
	NameApprovalGate    = "helix.approval_gate"
	NameSuspendStep     = "helix.suspend_step"
	NameResolveToolCall = "helix.resolve_tool_call"
)

// CodeNotApproved is the tool_end error code of a denied call.
const CodeNotApproved = "not_approved"

// SuspendedStep is the engine's durable record of a step waiting for human
// input (store.SessionState.SuspendedStep): enough for any run of the
// session to finish the step.
type SuspendedStep struct {
	// RunID is the run that suspended (usage keys and step IDs keep it).
	// The session's row keeps the record without RunID and Step: its
	// suspended step ID (StepID) holds them (see storedRecord).
	RunID string           `json:"runId,omitempty"`
	Step  int              `json:"step,omitempty"`
	Model helix.StepResult `json:"model"`
	// Results are the results known when the step suspended, by call
	// index (empty entries: calls still to resolve or to run later).
	Results []ToolResult `json:"results"`
}

// ApprovalInput lists the calls whose approval predicate decides whether
// they wait for a human.
type ApprovalInput struct {
	Run   RunInfo          `json:"run"`
	Step  int              `json:"step"`
	Calls []helix.ToolCall `json:"calls"`
}

// EvaluateApprovals returns the step that asks each call's approval
// predicate whether the call needs a human decision; its answers are
// checkpointed, so the suspend-or-run decision replays the same even for a
// predicate that is not pure. It fails closed: a predicate that errors or
// panics (or a call whose arguments are invalid) requires approval.
func (e *Env) EvaluateApprovals(in ApprovalInput) dbos.Step[[]bool] {
	return func(ctx context.Context) ([]bool, error) {
		def, err := e.RunAgent(in.Run)
		if err != nil {
			return nil, err
		}
		out := make([]bool, len(in.Calls))
		for i, call := range in.Calls {
			tool, ok := def.Tools[call.Name]
			if !ok {
				out[i] = true
				continue
			}
			args := call.Arguments
			if len(args) == 0 {
				args = json.RawMessage(`{}`)
			}
			tc := &toolContext{env: e, ctx: ctx, run: in.Run, step: in.Step, call: call}
			required, err := tool.RequiresApproval(ctx, args, tc)
			if err != nil {
				e.Log.Warn().Ctx(ctx).Str("event", "approval.predicate_failed").Str("sessionId", in.Run.SessionID).
					Str("tool", call.Name).Str("toolCallId", call.ID).Err(err).
					Msg("the approval predicate failed: the call requires approval (fail-closed)")
			}
			out[i] = required
		}
		return out, nil
	}
}

// PendingCall is a call the step waits for.
type PendingCall struct {
	Index int                  `json:"index"`
	Call  helix.ToolCall       `json:"call"`
	Kind  helix.SubmissionKind `json:"kind"`
}

// SuspendInput is a step that waits for human input.
type SuspendInput struct {
	Run     RunInfo       `json:"run"`
	Record  SuspendedStep `json:"record"`
	Pending []PendingCall `json:"pending"`
}

// SuspendOutput reports the suspension as written.
type SuspendOutput struct {
	Pending     []store.PendingClientToolCall `json:"pending"`
	Interrupted bool                          `json:"interrupted,omitempty"`
	Reason      string                        `json:"reason,omitempty"`
}

// SuspendStep returns the transaction that suspends a step: the pending
// calls (with their deadlines) and the step's record, tool_end chunks and
// usage for the results already known, tool_approval_request for each gated
// call, and the run status suspended_client_tool (or, when an interrupt was
// requested, the run ended interrupted with the calls kept for a resume).
func (e *Env) SuspendStep(in SuspendInput) dbos.Txn[SuspendOutput] {
	return func(ctx context.Context, tx dbos.Tx) (SuspendOutput, error) {
		run, step := in.Run, in.Record.Step
		def, err := e.RunAgent(run)
		if err != nil {
			return SuspendOutput{}, err
		}
		record, stepID, err := storedRecord(in.Record)
		if err != nil {
			return SuspendOutput{}, err
		}
		p := store.SuspendParams{SessionID: run.SessionID, RunID: run.RunID, StepID: stepID,
			Step: step, Record: record, Interrupted: interruptedChunk(run, step-1, "")}
		if h, ok := tx.(appendTaker); ok {
			// The step's chunks that wait for this transaction (its model
			// call's) go out in the suspension's append, ahead of its
			// own: they share a row of the stream.
			p.Ahead = h.TakeAppends(run.StreamID)
		}
		for _, r := range in.Record.Results {
			if r.ToolCallID == "" || helix.IsFinishTool(r.ToolName) {
				continue
			}
			chunks, usage := resultRecords(run, step, r)
			p.Chunks, p.Usage = append(p.Chunks, chunks...), append(p.Usage, usage...)
		}
		for _, pc := range in.Pending {
			c := store.PendingClientToolCall{ToolCallID: pc.Call.ID, ToolName: pc.Call.Name, Kind: pc.Kind,
				Arguments: argsOrEmpty(pc.Call.Arguments), Index: pc.Index, WorkflowID: run.WorkflowID}
			var timeout time.Duration
			if tool, ok := def.Tools[pc.Call.Name]; ok {
				timeout = tool.ClientTimeout()
				if pc.Kind == helix.SubmissionClientToolResult {
					// What validates the client's result (an approval
					// has none to validate).
					c.OutputSchema = tool.OutputSchema()
				}
			}
			if pc.Kind == helix.SubmissionApprovalResponse {
				c.ApprovalID = postgres.ApprovalID(run.RunID, pc.Call.ID)
				p.Chunks = append(p.Chunks, &helix.ToolApprovalRequestChunk{Base: base(run, step), ToolCallID: pc.Call.ID,
					ToolName: pc.Call.Name, ApprovalID: c.ApprovalID, Input: c.Arguments})
			}
			p.Pending = append(p.Pending, store.PendingCall{Call: c, Timeout: timeout})
		}
		res, err := e.InTx(tx).SuspendStep(ctx, p)
		if err != nil {
			return SuspendOutput{}, err
		}
		for _, c := range res.Pending {
			e.Log.Info().Ctx(ctx).Str("event", "client_tool.suspended").Str("sessionId", run.SessionID).Str("runId", run.RunID).
				Str("toolCallId", c.ToolCallID).Str("tool", c.ToolName).Str("kind", string(c.Kind)).Int64("deadlineAt", c.DeadlineAt).
				Msg("the run waits for a submission")
		}
		return SuspendOutput{Pending: compactPending(run, res.Pending), Interrupted: res.Interrupted, Reason: res.InterruptReason}, nil
	}
}

// appendTaker is a transaction that holds stream appends for its first
// statement, which its body can take and write with its own (the
// workflows' journal transactions).
type appendTaker interface {
	TakeAppends(stream string) []store.ChunkWrite
}

// compactPending leaves out of the calls a suspension wrote what its run
// implies, and their output schemas (the session's row keeps them for the
// submissions' validation; the workflow does not read them): the step's
// record, which a hibernated session keeps, is about 300 bytes shorter a
// call. SuspendOutput.Restore puts the implied fields back.
func compactPending(run RunInfo, calls []store.PendingClientToolCall) []store.PendingClientToolCall {
	out := slices.Clone(calls)
	for i := range out {
		c := &out[i]
		c.OutputSchema = nil
		LeaveOut(&c.RunID, run.RunID)
		LeaveOut(&c.WorkflowID, run.WorkflowID)
		LeaveOut(&c.OwnerSessionID, run.SessionID)
		if c.Kind == helix.SubmissionApprovalResponse {
			LeaveOut(&c.ApprovalID, postgres.ApprovalID(run.RunID, c.ToolCallID))
		}
	}
	return out
}

// Restore fills in what the suspension's record left out of its calls
// (compactPending), from run, the suspending run.
func (o *SuspendOutput) Restore(run RunInfo) {
	for i := range o.Pending {
		c := &o.Pending[i]
		PutBack(&c.RunID, run.RunID)
		PutBack(&c.WorkflowID, run.WorkflowID)
		PutBack(&c.OwnerSessionID, run.SessionID)
		if c.Kind == helix.SubmissionApprovalResponse {
			PutBack(&c.ApprovalID, postgres.ApprovalID(run.RunID, c.ToolCallID))
		}
	}
}

// LeaveOut empties *field when it holds implied: a record leaves out what
// its reader knows (PutBack restores it).
func LeaveOut(field *string, implied string) {
	if *field == implied {
		*field = ""
	}
}

// PutBack sets an empty *field to implied (what LeaveOut left out).
func PutBack(field *string, implied string) {
	if *field == "" {
		*field = implied
	}
}

// storedRecord returns rec as the session's row keeps it, with the
// suspended step ID written beside it: without the run and the step, which
// the ID names (StepID). loadRecord reads it back.
func storedRecord(rec SuspendedStep) (record []byte, stepID string, err error) {
	if rec.RunID == "" || rec.Step < 1 {
		return nil, "", fmt.Errorf("the suspended step record needs its run and its step (got run %q, step %d)", rec.RunID, rec.Step)
	}
	stepID = StepID(rec.RunID, rec.Step)
	rec.RunID, rec.Step = "", 0
	record, err = json.Marshal(rec)
	return record, stepID, err
}

// loadRecord decodes the suspended step record of session sessionID, whose
// suspended step ID is stepID: a record without its run and step
// (storedRecord) takes them from the ID; one with them (SaveSuspendedStep
// writes the whole record) keeps its own.
func loadRecord(sessionID string, raw []byte, stepID string) (*SuspendedStep, error) {
	var rec SuspendedStep
	if err := json.Unmarshal(raw, &rec); err != nil {
		return nil, fmt.Errorf("decode the suspended step of session %s: %w", sessionID, err)
	}
	if rec.RunID != "" {
		return &rec, nil
	}
	run, step, ok := postgres.SplitStepID(stepID)
	if !ok || step < 1 {
		return nil, fmt.Errorf("the suspended step of session %s has no run, and its step ID %q (want {runId}:{step}) names none", sessionID, stepID)
	}
	rec.RunID, rec.Step = run, step
	return &rec, nil
}

// NameSaveSuspendedStep is the step that records a result learned while a
// step waits.
const NameSaveSuspendedStep = "helix.save_suspended_step"

// SaveSuspendedStep returns the transaction that replaces the session's
// record of its suspended step: an approved tool ran, and a fresh run that
// finishes the step (after an interrupt) must not run it again.
func (e *Env) SaveSuspendedStep(sessionID string, rec SuspendedStep) dbos.Txn[bool] {
	return func(ctx context.Context, tx dbos.Tx) (bool, error) {
		b, err := json.Marshal(rec)
		if err != nil {
			return false, err
		}
		return true, e.InTx(tx).SaveSuspendedStep(ctx, sessionID, b)
	}
}

// ResolveInput is the end of one wait: TimedOut when the deadline passed
// without a message.
type ResolveInput struct {
	Run RunInfo `json:"run"`
	// Step is the suspended step and StepRunID the run that suspended it.
	Step      int                         `json:"step"`
	StepRunID string                      `json:"stepRunId"`
	Call      store.PendingClientToolCall `json:"call"`
	TimedOut  bool                        `json:"timedOut,omitempty"`
	// Take, when set, takes the call's message (the oldest untaken one
	// sent to Take.WorkflowID) in the same transaction; a message taken
	// means the wait did not time out.
	Take *Take `json:"take,omitempty"`
	// LeaveInterrupt leaves the interrupt flag to the step's commit, which
	// runs in the same transaction (store.ResolveParams.LeaveInterrupt).
	LeaveInterrupt bool `json:"leaveInterrupt,omitempty"`
}

// Take names the message a resolution takes: sent to WorkflowID on the
// call's topic, taken by the journal step StepID.
type Take struct {
	WorkflowID string `json:"workflowId"`
	StepID     int    `json:"stepId"`
}

// ResolveOutput is the call's state after the wait.
type ResolveOutput struct {
	Call        store.PendingClientToolCall `json:"call"`
	Interrupted bool                        `json:"interrupted,omitempty"`
	Reason      string                      `json:"reason,omitempty"`
}

// ResolveToolCall returns the transaction that takes a wait's outcome: the
// submission recorded for the call or its deadline passing, with the chunks
// of that outcome (tool_approval_response; tool_end for a client result, a
// denial or a timeout) and usage, written once per call; and the interrupt
// check (a wake-up for an interrupt ends the run interrupted here).
func (e *Env) ResolveToolCall(in ResolveInput) dbos.Txn[ResolveOutput] {
	return func(ctx context.Context, tx dbos.Tx) (ResolveOutput, error) {
		run, step := in.Run, in.Step
		timedOut := in.TimedOut
		switch d, held := tx.(deferrer); {
		case in.Take == nil:
		case !timedOut && held:
			// Whether a message was there changes nothing: it goes out
			// with the next statement.
			sql, args := recv.ConsumeStatement(in.Take.WorkflowID, in.Call.ToolCallID, in.Take.StepID)
			d.Defer(ctx, sql, args...)
		default:
			took, err := recv.Consume[dbos.Row](ctx, tx, in.Take.WorkflowID, in.Call.ToolCallID, in.Take.StepID)
			if err != nil {
				return ResolveOutput{}, err
			}
			timedOut = timedOut && !took
		}
		res, err := e.InTx(tx).ResolveToolCall(ctx, store.ResolveParams{
			SessionID: run.SessionID, RunID: run.RunID, Step: step, ToolCallID: in.Call.ToolCallID, TimedOut: timedOut,
			Outcome: func(c store.PendingClientToolCall) ([]helix.Chunk, []store.UsageRecord) {
				return outcomeRecords(run, step, c)
			},
			Interrupted:    interruptedChunk(run, step-1, ""),
			LeaveInterrupt: in.LeaveInterrupt,
		})
		if err != nil {
			return ResolveOutput{}, err
		}
		if c := res.Call; c.TimedOutAt != 0 && timedOut {
			e.Log.Warn().Ctx(ctx).Str("event", "client_tool.timeout").Str("sessionId", run.SessionID).Str("runId", run.RunID).
				Str("toolCallId", c.ToolCallID).Str("tool", c.ToolName).Msg("no submission before the deadline: the model sees a timeout error")
		}
		return ResolveOutput{Call: res.Call, Interrupted: res.Interrupted, Reason: res.InterruptReason}, nil
	}
}

// OutcomeResult is the tool result of a resolved call that does not run a
// tool (everything but an approved call).
func OutcomeResult(c store.PendingClientToolCall) ToolResult {
	r := ToolResult{ToolCallID: c.ToolCallID, ToolName: c.ToolName, Recorded: true}
	switch s := c.Submission; {
	case s == nil:
		r.Error, r.ErrorCode = TimeoutMessage(c), helix.CodeClientToolTimeout
	case s.Kind == helix.SubmissionApprovalResponse:
		r.Error, r.ErrorCode, r.Denied = helix.NotApprovedMessage, CodeNotApproved, true
	case s.Error != "":
		r.Error, r.ErrorCode = s.Error, helix.CodeClientToolError
	default:
		r.Result = compact(s.Result)
	}
	if c.Submission != nil {
		r.DurationMS = c.SubmittedAt - c.CreatedAt
	} else if c.TimedOutAt != 0 {
		r.DurationMS = c.TimedOutAt - c.CreatedAt
	}
	return r
}

// TimeoutMessage is the tool error the model sees when a client tool's
// deadline passes.
func TimeoutMessage(c store.PendingClientToolCall) string {
	return fmt.Sprintf("the client did not return a result for tool %q within %s: treat the call as failed",
		c.ToolName, time.Duration(c.DeadlineAt-c.CreatedAt)*time.Millisecond)
}

// outcomeRecords returns the chunks and usage rows of a resolved call.
func outcomeRecords(run RunInfo, step int, c store.PendingClientToolCall) ([]helix.Chunk, []store.UsageRecord) {
	var chunks []helix.Chunk
	if s := c.Submission; s != nil && s.Kind == helix.SubmissionApprovalResponse {
		chunks = append(chunks, &helix.ToolApprovalResponseChunk{Base: base(run, step), ToolCallID: c.ToolCallID,
			ToolName: c.ToolName, ApprovalID: c.ApprovalID, Approved: s.IsApproved(), Reason: s.Reason})
		if s.IsApproved() {
			return chunks, nil // the tool runs now; its result is committed with the step
		}
	}
	r := OutcomeResult(c)
	more, usage := resultRecords(run, step, r)
	if c.Kind == helix.SubmissionClientToolResult {
		client := false
		more[0].(*helix.ToolEndChunk).ProviderExecuted = &client
	}
	return append(chunks, more...), usage
}

// resultRecords returns the tool_end chunk and the usage row of a result.
// The row's key names the run and step as well as the call: a model may
// reuse a call ID, and each call is a row.
func resultRecords(run RunInfo, step int, r ToolResult) ([]helix.Chunk, []store.UsageRecord) {
	executed := true
	result := r.Result
	if r.Error != "" || len(result) == 0 {
		result = json.RawMessage("null")
	}
	d := r.DurationMS
	source := store.UsageTool
	if helix.IsSubAgentTool(r.ToolName) {
		source = store.UsageSubAgent
	}
	return []helix.Chunk{&helix.ToolEndChunk{Base: base(run, step), ToolCallID: r.ToolCallID, ToolName: r.ToolName,
			Result: result, Error: r.Error, ErrorCode: r.ErrorCode, ProviderExecuted: &executed}},
		[]store.UsageRecord{{SourceType: source, SourceName: r.ToolName, DurationMS: &d, Success: r.Error == "",
			Key: "tool:" + StepID(run.RunID, step) + ":" + r.ToolCallID}}
}

// interruptedChunk builds the run_interrupted chunk of run at step.
func interruptedChunk(run RunInfo, step int, checkpointID string) func(string) helix.Chunk {
	return func(reason string) helix.Chunk {
		var cp *string
		if checkpointID != "" {
			cp = &checkpointID
		}
		return &helix.RunInterruptedChunk{Base: base(run, step), RunID: run.RunID, CheckpointID: cp, Reason: reason}
	}
}

// compact removes the whitespace Postgres's jsonb adds to a stored result.
func compact(b json.RawMessage) json.RawMessage {
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return b
	}
	return out.Bytes()
}

func argsOrEmpty(args json.RawMessage) json.RawMessage {
	if len(args) == 0 {
		return json.RawMessage(`{}`)
	}
	return args
}
