package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// ModelInput is the input of the model step.
type ModelInput struct {
	Run  RunInfo `json:"run"`
	Step int     `json:"step"`
	// MessageCount, when not 0, is the session's message count as this
	// execution's own commit of the previous step left it: the step reads
	// nothing back (an agent whose system prompt depends on the custom state
	// reads it anyway). 0 reads the session, and checks for the trace of an
	// attempt lost in a crash.
	MessageCount int `json:"messageCount,omitempty"`
}

// ModelOutput is the checkpointed result of the model step: the model's
// step result, or the classified failure that ends the run.
type ModelOutput struct {
	Result     helix.StepResult `json:"result"`
	Failure    *Failure         `json:"failure,omitempty"`
	DurationMS int64            `json:"durationMs"`
	// MessageCount is the session's message count the request was built
	// from: what the step's commit expects to find (CommitInput).
	MessageCount int `json:"messageCount,omitempty"`
}

// CallModel returns the model step: it builds the request from the
// session's memory, streams the model's deltas live into the session's
// stream and returns the step result. A re-execution after a crash first
// removes the chunks of the lost attempt and emits stream_resync.
//
// The step's own chunks (step_start, then a tool_start per call) go out with
// the model's first delta. A model that streamed nothing (it answered at
// once, or its adapter does not stream) leaves them in *closing when closing
// is not nil, for the caller to write in the transaction that records the
// step (one write for the whole step instead of two), or to hold for the
// step's commit (HeldStarts).
//
// An attempt that follows a failed one (the step's retries) reads the
// step's view as a re-execution does: the failed attempt may have written
// some of its chunks, which the retry's would repeat.
func (e *Env) CallModel(in ModelInput, closing *[]helix.Chunk) dbos.Step[ModelOutput] {
	attempted := false
	return func(ctx context.Context) (ModelOutput, error) {
		retry := attempted
		attempted = true
		def, err := e.RunAgent(in.Run)
		if err != nil {
			return ModelOutput{Failure: &Failure{Message: err.Error(), Code: helix.CodeInternal}}, nil
		}
		st := &store.StepView{MessageCount: in.MessageCount}
		if in.MessageCount == 0 || def.Agent.SystemPromptFunc != nil || retry {
			if st, err = e.Store.ReadStep(ctx, store.ReadStepParams{
				SessionID: in.Run.SessionID, RunID: in.Run.RunID, AfterStep: in.Step - 1, MinSequence: in.Run.StartSequence,
			}); err != nil {
				return ModelOutput{}, err
			}
		}
		if st.Stale {
			if err := e.resync(ctx, in.Run, in.Step, st); err != nil {
				return ModelOutput{}, err
			}
		}
		if h := def.Agent.Hooks; h != nil && h.OnStepStart != nil {
			hc := helix.HookContext{SessionID: in.Run.SessionID, RunID: in.Run.RunID, AgentType: in.Run.AgentType, Step: in.Step}
			e.hook(ctx, "stepStart", hc, func() error { return h.OnStepStart(ctx, hc) })
		}
		prompt, failure := systemPrompt(ctx, def, st.CustomState)
		if failure != nil {
			return ModelOutput{Failure: failure}, nil
		}
		var system *helix.Message
		if prompt != "" {
			sm := helix.SystemMessage(prompt)
			system = &sm
		}
		// The conversation is the process's cached log, not a copy of it
		// (helix.ModelRequest: a model reads it and never modifies it).
		messages, err := e.request(ctx, in.Run.SessionID, st.MessageCount, system)
		if err != nil {
			return ModelOutput{}, err
		}
		req := helix.ModelRequest{
			Tools:     def.Specs,
			Config:    def.Agent.LLMConfig,
			AgentID:   in.Run.SessionID,
			AgentType: in.Run.AgentType,
			Step:      in.Step,
		}
		req.Messages = messages

		w := e.Store.NewWriter(in.Run.StreamID, &store.WriterOptions{RunID: in.Run.RunID, Fence: in.Run.StreamFence(),
			Guard: func(ctx context.Context) error { return e.Check(ctx, in.Run.Ticket) }})
		defer func() { _ = w.Close(context.WithoutCancel(ctx)) }()
		// step_start is queued with the model's first delta (it goes out
		// within the flush interval); without deltas, with the step's
		// tool_start chunks.
		stepStart := stepStartChunk(in.Run, in.Step)
		started := false
		var writeErr error
		start := func() {
			if !started && writeErr == nil {
				started = true
				writeErr = w.Queue(ctx, stepStart)
			}
		}
		write := func(c helix.Chunk) {
			if start(); writeErr == nil {
				writeErr = w.Write(ctx, c)
			}
		}
		// flush writes what the step queued (step_start at least).
		flush := func() error {
			if start(); writeErr != nil {
				return fenced(in.Run, writeErr)
			}
			return fenced(in.Run, w.Flush(ctx))
		}
		cb := helix.StreamCallbacks{
			OnTextDelta: func(d string) { write(&helix.TextDeltaChunk{Base: base(in.Run, in.Step), Delta: d}) },
			OnThinking: func(c string, complete bool) {
				write(&helix.ThinkingChunk{Base: base(in.Run, in.Step), Content: c, IsComplete: complete})
			},
			OnToolArgStart: func(id, name string) {
				write(&helix.ToolArgStreamStartChunk{Base: base(in.Run, in.Step), ToolCallID: id, ToolName: name})
			},
			OnToolArgDelta: func(id, d string) {
				write(&helix.ToolArgStreamDeltaChunk{Base: base(in.Run, in.Step), ToolCallID: id, Delta: d})
			},
			OnToolArgEnd: func(id string) { write(&helix.ToolArgStreamEndChunk{Base: base(in.Run, in.Step), ToolCallID: id}) },
		}
		began := time.Now()
		mctx, span := e.Telemetry.startModelSpan(ctx, in, def)
		res, err := generate(mctx, def.Agent.Model, req, cb)
		out := ModelOutput{Result: res, DurationMS: time.Since(began).Milliseconds(), MessageCount: st.MessageCount}
		if err == nil || ctx.Err() == nil {
			e.Telemetry.endModelCall(span, in.Run, def, res, err, time.Since(began))
		} else {
			span.End() // a shutdown, not an outcome of the model
		}
		if err != nil {
			if ctx.Err() != nil {
				// Shutdown or cancellation: not an outcome of the model.
				// Leave the step unrecorded so recovery runs it again.
				return ModelOutput{}, fmt.Errorf("model call interrupted: %w", context.Cause(ctx))
			}
			out.Failure = classify(err)
			return out, flush()
		}
		if res.Type == helix.StepError {
			out.Failure = &Failure{Message: res.Error, Code: firstNonEmpty(res.ErrorCode, helix.CodeModelError)}
			return out, flush()
		}
		if len(res.ToolCalls) == 0 && res.Content == "" && helix.IsErrorStopReason(res.StopReason) {
			out.Failure = &Failure{Message: fmt.Sprintf("the model stopped with %s and produced nothing", res.StopReason), Code: helix.CodeModelError}
			return out, flush()
		}
		if writeErr != nil {
			return ModelOutput{}, fenced(in.Run, writeErr)
		}
		// tool_start for every call, in the model's order; checkpointed with
		// this step, so emitted once per committed model call.
		own := append([]helix.Chunk{stepStart}, toolStartChunks(in.Run, in.Step, def, res)...)
		if !started && closing != nil {
			*closing = own
			return out, nil
		}
		if started {
			own = own[1:]
		}
		for _, c := range own {
			if err := w.Queue(ctx, c); err != nil {
				return ModelOutput{}, fenced(in.Run, err)
			}
		}
		return out, fenced(in.Run, w.Flush(ctx))
	}
}

// resync removes the chunks a crashed attempt of this step (or a later one)
// left in the stream and tells readers with stream_resync.
func (e *Env) resync(ctx context.Context, run RunInfo, step int, st *store.StepView) error {
	// Fenced: an execution taken over must not remove what the workflow's
	// new owner wrote.
	res, err := e.Store.CleanupAttempt(ctx, run.StreamFence(), run.StreamID, run.RunID, step-1, st.StaleFrom)
	if err != nil || res.Removed == 0 {
		return fenced(run, err)
	}
	e.Log.Warn().Ctx(ctx).Str("event", "stream.resync").Str("sessionId", run.SessionID).Str("runId", run.RunID).
		Int("step", step).Int("removed", res.Removed).Msg("removed the chunks of an attempt lost in a crash")
	_, err = e.Store.Append(ctx, run.StreamID, []store.ChunkWrite{{RunID: run.RunID, Fence: run.StreamFence(), Chunk: &helix.StreamResyncChunk{
		Base:         base(run, step-1),
		CheckpointID: st.CheckpointID,
		StepCount:    st.StepCount,
		MessageCount: st.MessageCount,
		FromSequence: res.MinSequence,
		Reason:       helix.ResyncCrashRecovery,
	}}})
	return fenced(run, err)
}

func systemPrompt(ctx context.Context, def *AgentDef, customState json.RawMessage) (prompt string, failure *Failure) {
	prompt = def.Agent.SystemPrompt
	if f := def.Agent.SystemPromptFunc; f != nil {
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panic: %v", r)
				}
			}()
			prompt, err = f(ctx, customState)
		}()
		if err != nil {
			return "", &Failure{Message: fmt.Sprintf("agent %q: SystemPromptFunc failed: %v", def.Agent.Name, err), Code: helix.CodeInternal}
		}
	}
	if frag := def.skillsFragment(); frag != "" {
		if prompt != "" {
			prompt += "\n\n"
		}
		prompt += frag
	}
	return prompt, nil
}

// generate calls the model, turning a panic into an error.
func generate(ctx context.Context, m helix.Model, req helix.ModelRequest, cb helix.StreamCallbacks) (res helix.StepResult, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the model panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return m.GenerateStep(ctx, req, cb)
}

func classify(err error) *Failure {
	var me *helix.ModelError
	if errors.As(err, &me) {
		return &Failure{Message: me.Error(), Code: firstNonEmpty(me.Code, helix.CodeModelError), Recoverable: me.Recoverable}
	}
	return &Failure{Message: err.Error(), Code: helix.CodeModelError}
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
