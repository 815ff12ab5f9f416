package scripted

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	helix "github.com/helix-agents/helix-dbos"
)

// ModelName is the StepResult.Model of every result a scripted model
// returns.
const ModelName = "scripted"

// Errors a [Model] returns, matched with errors.Is. The errors GenerateStep
// returns also match *helix.ModelError with errors.As (code model_error,
// not recoverable), so the engine fails the run with a classified error
// instead of retrying a request the script cannot answer.
var (
	// ErrInvalidScript matches the errors of [New], [NewKeyed], [Parse] and
	// [Load] for a script that cannot play, and GenerateStep's error for an
	// invalid step returned by a [StepFunc].
	ErrInvalidScript = errors.New("scripted: invalid script")
	// ErrScriptExhausted: the request asked for a step past the end of the
	// script.
	ErrScriptExhausted = errors.New("scripted: script exhausted")
	// ErrUnknownAgent: a keyed model has no script for the request's agent
	// type.
	ErrUnknownAgent = errors.New("scripted: no script for the agent type")
	// ErrUnexpectedRequest: the request does not satisfy the step's
	// [Expect].
	ErrUnexpectedRequest = errors.New("scripted: unexpected request")
)

// StepFunc returns the step at index (0-based, the number of assistant
// messages in req) of a programmatic script. It must be deterministic in
// its arguments (a step re-executed after a crash must play the same) and
// safe for concurrent use. An error it returns is returned by GenerateStep,
// wrapped with the agent type and index.
type StepFunc func(index int, req helix.ModelRequest) (Step, error)

// Model is a deterministic [helix.Model] that plays a script. It is
// immutable after construction and safe for concurrent use.
type Model struct {
	// shared is the script of every agent type (New, Parse with steps).
	shared []*compiled
	// keyed are the scripts per agent type; non-nil for a keyed model.
	keyed map[string][]*compiled
	// step is the programmatic script (Generate).
	step StepFunc
}

var _ helix.Model = (*Model)(nil)

// New returns a model that plays steps for every agent type, each session
// from its first step. It panics if a step is invalid, naming its index:
// a script in Go is a literal of a test or demo, so a mistake in it is a
// programming error (as with regexp.MustCompile). The steps are copied.
func New(steps ...Step) *Model {
	script, err := compileScript("", steps)
	if err != nil {
		panic(err)
	}
	return &Model{shared: script}
}

// NewKeyed returns a model with one script per agent type
// (ModelRequest.AgentType), so that sub-agents are scripted too. A request
// from an agent type without a script fails with [ErrUnknownAgent]. Like
// [New], it panics on an invalid step.
func NewKeyed(scripts map[string][]Step) *Model {
	m, err := newKeyed(scripts)
	if err != nil {
		panic(err)
	}
	return m
}

func newKeyed(scripts map[string][]Step) (*Model, error) {
	if len(scripts) == 0 {
		return nil, fmt.Errorf("%w: no agent scripts", ErrInvalidScript)
	}
	keyed := make(map[string][]*compiled, len(scripts))
	for _, agent := range slices.Sorted(maps.Keys(scripts)) {
		if agent == "" {
			return nil, fmt.Errorf("%w: an agent script has an empty agent type", ErrInvalidScript)
		}
		script, err := compileScript(agent, scripts[agent])
		if err != nil {
			return nil, err
		}
		keyed[agent] = script
	}
	return &Model{keyed: keyed}, nil
}

// Generate returns a model whose steps come from f, for scripts that loop
// or depend on the request. Each returned step is validated when it is
// played; an invalid one fails the call with [ErrInvalidScript].
func Generate(f StepFunc) *Model {
	if f == nil {
		panic("scripted: Generate needs a StepFunc")
	}
	return &Model{step: f}
}

func compileScript(agent string, steps []Step) ([]*compiled, error) {
	if len(steps) == 0 {
		return nil, fmt.Errorf("%w: %sthe script has no steps", ErrInvalidScript, agentPrefix(agent))
	}
	script := make([]*compiled, len(steps))
	ids := map[string]int{}
	for i, s := range steps {
		c, err := compile(s, i)
		if err != nil {
			return nil, fmt.Errorf("%w: %sstep %d: %w", ErrInvalidScript, agentPrefix(agent), i, err)
		}
		// Tool call IDs must be unique within a session, whose script this
		// is: the engine keys tool executions and results on them.
		for _, call := range c.calls {
			if j, dup := ids[call.ID]; dup && j != i {
				return nil, fmt.Errorf("%w: %sstep %d: tool call ID %q is already used by step %d", ErrInvalidScript, agentPrefix(agent), i, call.ID, j)
			}
			ids[call.ID] = i
		}
		script[i] = c
	}
	return script, nil
}

func agentPrefix(agent string) string {
	if agent == "" {
		return ""
	}
	return fmt.Sprintf("agent %q: ", agent)
}

// Position returns the index of the script step a request plays: the
// number of assistant messages in msgs. Every completed step of a session
// appends exactly one assistant message, so the position advances with
// the conversation across steps and turns, and a step re-executed after a
// crash (a new process, a new Model) plays the same step again.
func Position(msgs []helix.Message) int {
	n := 0
	for _, m := range msgs {
		if m.Role == helix.RoleAssistant {
			n++
		}
	}
	return n
}

// GenerateStep plays the step at the request's [Position] in the script of
// req.AgentType: it checks the step's expectations, streams its thinking,
// text deltas and (with StreamToolArgs) tool arguments through cb, and
// returns the result. The result is a function of the request alone.
//
// A step with an Error returns that error as a *helix.ModelError, with no
// result, as a provider adapter would; the engine classifies it. A failed
// step appends no assistant message, so the same request plays the same
// error again.
func (m *Model) GenerateStep(ctx context.Context, req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
	if err := ctx.Err(); err != nil {
		return helix.StepResult{}, err
	}
	index := Position(req.Messages)
	step, err := m.lookup(index, req)
	if err != nil {
		return helix.StepResult{}, err
	}
	if step.expect != nil {
		if diffs := step.expect.mismatches(req); len(diffs) > 0 {
			return helix.StepResult{}, failure(ErrUnexpectedRequest,
				"scripted model: agent %q step %d: the request does not match the script: %s",
				req.AgentType, index, strings.Join(diffs, "; "))
		}
	}
	if step.err != nil {
		e := *step.err
		return helix.StepResult{}, &e
	}
	return step.play(ctx, req, cb)
}

// lookup returns the compiled step at index for req's agent type.
func (m *Model) lookup(index int, req helix.ModelRequest) (*compiled, error) {
	if m.step != nil {
		s, err := m.step(index, req)
		if err != nil {
			return nil, fmt.Errorf("scripted model: agent %q step %d: %w", req.AgentType, index, err)
		}
		c, err := compile(s, index)
		if err != nil {
			return nil, failure(ErrInvalidScript, "scripted model: agent %q step %d: invalid step: %v", req.AgentType, index, err)
		}
		return c, nil
	}
	script := m.shared
	if m.keyed != nil {
		var ok bool
		if script, ok = m.keyed[req.AgentType]; !ok {
			return nil, failure(ErrUnknownAgent, "scripted model: no script for agent %q (scripted agents: %s)",
				req.AgentType, strings.Join(slices.Sorted(maps.Keys(m.keyed)), ", "))
		}
	}
	if index >= len(script) {
		return nil, failure(ErrScriptExhausted,
			"scripted model: agent %q asked for step %d but its script has %d steps (the step index is the number of assistant messages in the request)",
			req.AgentType, index, len(script))
	}
	return script[index], nil
}

// play streams the step through cb and returns its result.
func (c *compiled) play(ctx context.Context, req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
	res := helix.StepResult{Type: helix.StepText, Content: c.text, StopReason: c.stop, Model: ModelName}
	if c.thinking != "" {
		res.Thinking = &helix.Thinking{Content: c.thinking}
		cb.Thinking(c.thinking, true)
	}
	p := pacer{ctx: ctx, delay: c.delay}
	for _, d := range c.deltas {
		if err := p.next(); err != nil {
			return helix.StepResult{}, err
		}
		cb.TextDelta(d)
	}
	if len(c.calls) > 0 {
		res.Type = helix.StepToolCalls
		res.ToolCalls = make([]helix.ToolCall, len(c.calls))
		for i, call := range c.calls {
			// A copy: the caller may keep or change the result.
			call.Arguments = bytes.Clone(call.Arguments)
			res.ToolCalls[i] = call
			if !c.streamArgs {
				continue
			}
			cb.ToolArgStart(call.ID, call.Name)
			for _, d := range splitArgs(call.Arguments) {
				if err := p.next(); err != nil {
					return helix.StepResult{}, err
				}
				cb.ToolArgDelta(call.ID, d)
			}
			cb.ToolArgEnd(call.ID)
		}
	}
	if c.usage != nil {
		res.Usage = *c.usage
	} else {
		res.Usage = syntheticUsage(req, c)
	}
	return res, nil
}

// pacer sleeps DeltaDelay before every delta but the first.
type pacer struct {
	ctx     context.Context
	delay   time.Duration
	started bool
}

func (p *pacer) next() error {
	if !p.started || p.delay <= 0 {
		p.started = true
		return p.ctx.Err()
	}
	t := time.NewTimer(p.delay)
	defer t.Stop()
	select {
	case <-p.ctx.Done():
		return p.ctx.Err()
	case <-t.C:
		return nil
	}
}

// syntheticUsage derives a usage from lengths, one token per four bytes
// rounded up, so that usage totals are deterministic and plausible.
func syntheticUsage(req helix.ModelRequest, c *compiled) helix.Usage {
	in := 0
	for _, m := range req.Messages {
		in += len(m.Content)
		for _, tc := range m.ToolCalls {
			in += len(tc.Arguments)
		}
	}
	out := len(c.text) + len(c.thinking)
	for _, tc := range c.calls {
		out += len(tc.Arguments)
	}
	return helix.Usage{InputTokens: tokens(in), OutputTokens: tokens(out)}
}

func tokens(bytes int) int { return (bytes + 3) / 4 }

// scriptError is a failure of the script itself: it matches its sentinel
// with errors.Is and *helix.ModelError with errors.As.
type scriptError struct {
	sentinel error
	model    *helix.ModelError
}

func failure(sentinel error, format string, args ...any) error {
	return &scriptError{sentinel: sentinel, model: &helix.ModelError{Code: helix.CodeModelError, Message: fmt.Sprintf(format, args...)}}
}

func (e *scriptError) Error() string   { return e.model.Error() }
func (e *scriptError) Unwrap() []error { return []error{e.sentinel, e.model} }
