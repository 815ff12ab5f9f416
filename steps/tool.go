package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/statepatch"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// Tool error codes carried in tool_end chunks.
const (
	CodeInvalidArguments = "invalid_arguments"
	CodeUnknownTool      = "unknown_tool"
	CodeToolError        = "tool_error"
	CodeToolPanic        = "tool_panic"
)

// ToolInput is the input of one tool step.
type ToolInput struct {
	Run  RunInfo        `json:"run"`
	Step int            `json:"step"`
	Call helix.ToolCall `json:"call"`
	// Staged are the custom-state changes made earlier in the step, in the
	// model's order, which the tool sees on top of the committed state
	// (phase 2: finishWith tools see phase 1's changes).
	Staged []helix.PatchOp `json:"staged,omitempty"`
	// Approval is the answer of the person who approved the call
	// (OutcomeApproved), for its span; never recorded.
	Approval string `json:"-"`
	// Starts are the step's start chunks when the step holds them
	// (HeldStarts): the tool's first event writes them first. Never
	// recorded.
	Starts *HeldStarts `json:"-"`
	// Tx is the transaction a transactional tool's call runs in (its
	// writes commit with the call's record, which the journal writes in
	// it); nil for other tools. Never recorded.
	Tx pgx.Tx `json:"-"`
}

// ToolResult is the checkpointed outcome of one tool call.
type ToolResult struct {
	ToolCallID string          `json:"toolCallId,omitempty"`
	ToolName   string          `json:"toolName,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      string          `json:"error,omitempty"`
	ErrorCode  string          `json:"errorCode,omitempty"`
	Patches    []helix.PatchOp `json:"patches,omitempty"`
	DurationMS int64           `json:"durationMs,omitempty"`
	// FinishWith is set when a successful finishWith tool ends the turn.
	FinishWith bool `json:"finishWith,omitempty"`
	// Recorded is set when the result's tool_end chunk and usage row are
	// already written (a result known when its step suspended, or the
	// outcome of a wait); the step's commit does not write them again.
	Recorded bool `json:"recorded,omitempty"`
	// Denied is set for an approval-gated call that was denied: the tool
	// never ran, so AfterTool does not fire.
	Denied bool `json:"denied,omitempty"`
}

// Content is the tool-result message content the model reads.
func (r ToolResult) Content() string {
	if r.Error != "" {
		b, _ := json.Marshal(map[string]string{"error": r.Error})
		return string(b)
	}
	if len(r.Result) == 0 {
		return "null"
	}
	return string(r.Result)
}

// RunTool returns the step that executes one server tool call: it validates
// the arguments, fires BeforeTool, runs the tool with a ToolContext over the
// session's custom state, fires OnStateChange and returns the tool's state
// changes as patches. They are checkpointed with the step's output (a replay
// gets the same patches without running the tool) and applied by the step's
// commit in the order the tools made them (see StepPatches). Tool errors and
// panics are results the model sees.
//
// The step is the tool call's span (under the step's span in ctx) and its
// observation in helix_tool_call_duration_seconds.
func (e *Env) RunTool(in ToolInput) dbos.Step[ToolResult] {
	body := e.runTool(in)
	return func(ctx context.Context) (ToolResult, error) {
		ctx, span := e.Telemetry.StartToolSpan(ctx, in.Run, in.Step, in.Call, time.Time{})
		if in.Approval != "" && span.IsRecording() {
			span.SetAttributes(AttrApproval.String(in.Approval))
		}
		began := time.Now()
		res, err := body(ctx)
		switch {
		case err != nil:
			span.RecordError(err)
		case res.ErrorCode != CodeUnknownTool && res.ErrorCode != CodeInvalidArguments && res.ErrorCode != helix.CodeInternal:
			// Only tools that ran: a name the model made up is no label.
			e.Telemetry.Metrics.ToolDuration.WithLabelValues(in.Run.AgentType, in.Call.Name, success(res.Error == "")).
				Observe(time.Since(began).Seconds())
		}
		EndToolSpan(span, res, time.Time{})
		return res, err
	}
}

func (e *Env) runTool(in ToolInput) dbos.Step[ToolResult] {
	return func(ctx context.Context) (ToolResult, error) {
		res := ToolResult{ToolCallID: in.Call.ID, ToolName: in.Call.Name}
		def, err := e.RunAgent(in.Run)
		if err != nil {
			res.Error, res.ErrorCode = err.Error(), helix.CodeInternal
			return res, nil
		}
		tool, ok := def.Tools[in.Call.Name]
		if !ok || helix.IsFinishTool(in.Call.Name) {
			names := make([]string, 0, len(def.Tools))
			for n := range def.Tools {
				names = append(names, n)
			}
			sort.Strings(names)
			res.Error = fmt.Sprintf("unknown tool %q: the available tools are %v", in.Call.Name, names)
			res.ErrorCode = CodeUnknownTool
			return res, nil
		}
		args := in.Call.Arguments
		if len(args) == 0 {
			args = json.RawMessage(`{}`)
		}
		if err := tool.ValidateArguments(args); err != nil {
			res.Error, res.ErrorCode = err.Error(), CodeInvalidArguments
			return res, nil
		}
		tc := &toolContext{env: e, ctx: ctx, run: in.Run, step: in.Step, call: in.Call, staged: in.Staged, starts: in.Starts}
		if tool.IsTransactional() {
			if in.Tx == nil {
				res.Error, res.ErrorCode = fmt.Sprintf("transactional tool %q was called without its transaction", in.Call.Name), helix.CodeInternal
				return res, nil
			}
			tc.tx = in.Tx
		}
		hc := helix.HookContext{SessionID: in.Run.SessionID, RunID: in.Run.RunID, AgentType: in.Run.AgentType, Step: in.Step}
		hooks := def.Agent.Hooks
		if hooks != nil && hooks.BeforeTool != nil {
			e.hook(ctx, "beforeTool", hc, func() error { return hooks.BeforeTool(ctx, hc, in.Call) })
		}
		began := time.Now()
		var out json.RawMessage
		if tc.tx != nil {
			out, err = tool.ExecuteTx(ctx, toolTx{tc.tx}, args, tc)
			if RetriesTx(err) {
				return res, err // the journal runs the call again, on a fresh transaction
			}
			var panicked *helix.ToolPanicError
			if err != nil && ctx.Err() == nil && !errors.Is(err, helix.ErrTxToolTimeout) && !errors.As(err, &panicked) &&
				tc.tx.Conn().IsClosed() {
				// Its transaction's connection was lost (a database
				// restart, a failover): nothing of the call committed, and
				// its error is the outage's, not the tool's. (A timeout's
				// cancelled statement closes the connection too: that one
				// is the tool's.)
				return res, &TxConnLostError{Tool: in.Call.Name, Err: err}
			}
		} else if tool.CancelsOnInterrupt() {
			cctx, stop := e.cancelOnInterrupt(ctx, in.Run.SessionID)
			out, err = tool.Execute(cctx, args, tc)
			if err != nil && errors.Is(context.Cause(cctx), errCallInterrupted) {
				err = fmt.Errorf("the call was cancelled: %w (%v)", errCallInterrupted, err)
			}
			stop()
		} else {
			out, err = tool.Execute(ctx, args, tc)
		}
		res.DurationMS = time.Since(began).Milliseconds()
		if perr := e.CallProbe(ctx, ProbeInfo{Point: ProbeAfterTool, SessionID: in.Run.SessionID, RunID: in.Run.RunID,
			Step: in.Step, ToolCallID: in.Call.ID, ToolName: in.Call.Name}); perr != nil {
			return res, perr
		}
		if err != nil {
			if ctx.Err() != nil {
				return res, fmt.Errorf("tool %q interrupted: %w", in.Call.Name, context.Cause(ctx))
			}
			var panicErr *helix.ToolPanicError
			res.Error, res.ErrorCode = err.Error(), CodeToolError
			if errors.As(err, &panicErr) {
				res.ErrorCode = CodeToolPanic
				e.Log.Error().Ctx(ctx).Str("event", "tool.panic").Str("sessionId", in.Run.SessionID).Str("tool", in.Call.Name).
					Str("stack", panicErr.Stack).Msg(panicErr.Error())
			}
			if tc.tx != nil {
				// Its writes and events go with its transaction.
				return res, &TxRolledBackError{Result: res}
			}
			return res, nil // a failed tool's state changes are dropped
		}
		res.Result = out
		res.FinishWith = tool.IsFinishWith()
		if res.Patches, err = tc.patches(); err != nil {
			return res, err
		}
		if len(res.Patches) > 0 && hooks != nil && hooks.OnStateChange != nil {
			e.hook(ctx, "onStateChange", hc, func() error { return hooks.OnStateChange(ctx, hc, res.Patches) })
		}
		return res, nil
	}
}

// hook runs one user hook, logging (never propagating) its error or panic.
func (e *Env) hook(ctx context.Context, name string, hc helix.HookContext, fn func() error) {
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		err = fn()
	}()
	if err != nil {
		e.Log.Warn().Ctx(ctx).Str("event", "hook.failed").Str("hook", name).Str("sessionId", hc.SessionID).
			Str("runId", hc.RunID).Int("step", hc.Step).Err(err).Msg("hook failed; the run continues")
	}
}

// toolContext implements helix.ToolContext for one tool call.
type toolContext struct {
	env  *Env
	ctx  context.Context
	run  RunInfo
	step int
	call helix.ToolCall

	// staged are the step's earlier changes the tool sees.
	staged []helix.PatchOp
	// starts are the step's held start chunks, which precede the tool's
	// events (nil when none are held).
	starts *HeldStarts
	// tx is a transactional tool's savepoint (nil for other tools): its
	// events are written in it.
	tx pgx.Tx

	mu sync.Mutex
	// base is the state the tool started from (the committed state with
	// staged applied) and state its current view; both are loaded on the
	// first GetState or SetState, so a tool that never touches the state
	// costs no read.
	base, state json.RawMessage
	loaded      bool
	changed     bool
}

// load reads the custom state once; the caller holds t.mu.
func (t *toolContext) load() error {
	if t.loaded {
		return nil
	}
	s := t.env.Store
	if t.tx != nil {
		// A transactional tool holds a connection: everything it reads
		// goes through it (no second connection, which a pool that its
		// tools' transactions fill could not give).
		s = s.WithQuerier(postgres.PgxQuerier(t.tx))
	}
	st, err := s.LoadState(t.ctx, t.run.SessionID)
	if err != nil {
		return fmt.Errorf("load custom state: %w", err)
	}
	base := st.CustomState
	if len(t.staged) > 0 {
		if base, _, err = statepatch.Apply(base, t.staged); err != nil {
			return fmt.Errorf("apply the step's earlier state changes: %w", err)
		}
	}
	t.base, t.state, t.loaded = base, base, true
	return nil
}

// patches returns the tool's changes to the state as RFC 6902 patches.
func (t *toolContext) patches() ([]helix.PatchOp, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.changed {
		return nil, nil
	}
	return statepatch.Diff(t.base, t.state)
}

func (t *toolContext) SessionID() string  { return t.run.SessionID }
func (t *toolContext) RunID() string      { return t.run.RunID }
func (t *toolContext) AgentType() string  { return t.run.AgentType }
func (t *toolContext) ToolCallID() string { return t.call.ID }
func (t *toolContext) ToolName() string   { return t.call.Name }
func (t *toolContext) Step() int          { return t.step }

// IdempotencyKey is the workflow ID and the tool call ID: the same on every
// re-execution of this call, distinct for every other call.
func (t *toolContext) IdempotencyKey() string { return t.run.WorkflowID + "/" + t.call.ID }

func (t *toolContext) GetState(into any) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.load(); err != nil {
		return err
	}
	if err := json.Unmarshal(t.state, into); err != nil {
		return fmt.Errorf("decode custom state: %w", err)
	}
	return nil
}

func (t *toolContext) SetState(state any) error {
	b, err := json.Marshal(state)
	if err != nil {
		return fmt.Errorf("encode custom state: %w", err)
	}
	if !statepatch.IsObject(b) {
		return fmt.Errorf("custom state must be a JSON object, got %s", truncate(b, 60))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.load(); err != nil {
		return err
	}
	t.state, t.changed = b, true
	return nil
}

func (t *toolContext) Emit(eventName string, data any) error {
	if eventName == "" {
		return errors.New("emit: the event name is empty")
	}
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("emit %q: encode data: %w", eventName, err)
	}
	if err := t.starts.Flush(t.ctx); err != nil {
		return fmt.Errorf("emit %q: write the step's start chunks first: %w", eventName, err)
	}
	if err := t.env.Check(t.ctx, t.run.Ticket); err != nil {
		return err
	}
	chunk := &helix.CustomEventChunk{Base: base(t.run, t.step), EventName: eventName, Data: b}
	if t.tx != nil {
		// A transactional tool's event commits with its writes and its
		// record (the record's owner check fences it).
		_, err = t.env.Store.WithQuerier(postgres.PgxQuerier(t.tx)).Append(t.ctx, t.run.StreamID,
			[]store.ChunkWrite{{RunID: t.run.RunID, Chunk: chunk}})
		return err
	}
	_, err = t.env.Store.Append(t.ctx, t.run.StreamID, []store.ChunkWrite{{RunID: t.run.RunID, Fence: t.run.StreamFence(), Chunk: chunk}})
	return fenced(t.run, err)
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
