package scripted

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	helix "github.com/helix-agents/helix-dbos"
)

// Step is one scripted model step: what the model answers to the request
// at its position in the script. A step is text, tool calls, a structured
// output, any combination of those three, or an error.
type Step struct {
	// Text is the assistant text, streamed through OnTextDelta in
	// word-sized deltas (each delta is a word and the whitespace after it)
	// unless Deltas gives the split.
	Text string
	// Deltas is the exact split in which Text is streamed. When both are
	// set, their concatenation must equal Text; when only Deltas is set,
	// Text is their concatenation.
	Deltas []string
	// DeltaDelay is the pause between two consecutive deltas of the step
	// (text deltas and, with StreamToolArgs, argument deltas), so a demo
	// streams at a human pace or a test can interrupt a step mid-stream.
	// The pause honours ctx: a cancelled context ends the step with
	// ctx.Err(). Zero streams at once.
	DeltaDelay time.Duration
	// Thinking is reasoning content, reported whole through
	// OnThinking(content, true) before the text and kept in the result.
	Thinking string
	// ToolCalls are the tool calls of the step, in order.
	ToolCalls []Call
	// Output is a structured output. It is played as a call to the
	// __finish__ tool ([helix.FinishToolName]) with Output as its
	// arguments, after ToolCalls, because that is how the engine receives
	// structured output. It must marshal to a JSON object.
	Output any
	// StreamToolArgs streams every call's arguments through OnToolArgStart,
	// OnToolArgDelta and OnToolArgEnd, as providers that stream tool calls
	// do. Off by default: most tests and benchmarks do not need the chunks.
	StreamToolArgs bool
	// Error makes the step fail: GenerateStep returns it as a
	// *helix.ModelError. An error step carries nothing else (Expect aside).
	Error *StepError
	// Usage is the step's token usage. Default: a synthetic usage derived
	// from lengths, one token per four bytes rounded up (input: the
	// request's message contents and tool arguments; output: the step's
	// text, thinking and arguments).
	Usage *helix.Usage
	// StopReason defaults to tool_use when the step has tool calls (an
	// Output included) and to end_turn otherwise. A step with no text, no
	// calls and no output must set it (e.g. max_tokens), since an empty
	// answer is otherwise almost certainly a mistake in the script.
	StopReason helix.StopReason
	// Expect, when set, is checked against the request before the step
	// plays; a mismatch fails the call with [ErrUnexpectedRequest].
	Expect *Expect
}

// Call is a scripted tool call.
type Call struct {
	// ID is the tool call ID. Default: "call-<step>-<i>", where step is the
	// step's index in the script (session-wide, so IDs are unique within a
	// session across turns) and i the call's index within the step.
	ID string
	// Name is the tool's name; required.
	Name string
	// Args are the call's arguments, marshalled with encoding/json
	// (a json.RawMessage is used as is). They must be a JSON object; nil
	// means {}.
	Args any
}

// StepError is a scripted model failure, returned by GenerateStep as a
// *helix.ModelError with the same fields.
type StepError struct {
	// Message is the error message; required.
	Message string
	// Code is one of the helix Code* constants. Default:
	// helix.CodeModelError.
	Code string
	// Recoverable says whether retrying the same request may succeed.
	Recoverable bool
	// StatusCode is the HTTP status a provider would have answered, if any.
	StatusCode int
}

// Expect describes what the request of a step must look like. Every set
// field must hold; a mismatch names every difference.
type Expect struct {
	// LastRole is the role of the request's last message.
	LastRole helix.Role
	// LastMessageContains must be a substring of the content of the
	// request's last message.
	LastMessageContains string
	// ToolResultFor is a tool name: the messages after the request's last
	// assistant message (the previous step's tool results) must include a
	// result of a call to this tool.
	ToolResultFor string
	// HasTools are tool names the request must offer (ModelRequest.Tools).
	HasTools []string
}

// Repeat returns n copies of step followed by then: the script of a loop,
// e.g. a benchmark's "1000 steps each calling one no-op tool, then
// finish". Leave the call IDs of step empty so that each copy gets its own.
func Repeat(n int, step Step, then ...Step) []Step {
	steps := make([]Step, 0, max(n, 0)+len(then))
	for range n {
		steps = append(steps, step)
	}
	return append(steps, then...)
}

// compiled is a validated step, ready to play: deltas split, arguments
// marshalled, IDs assigned. It is never mutated after compile, so a Model
// can share it between goroutines.
type compiled struct {
	text       string
	deltas     []string
	delay      time.Duration
	thinking   string
	calls      []helix.ToolCall
	streamArgs bool
	err        *helix.ModelError
	usage      *helix.Usage
	stop       helix.StopReason
	expect     *Expect
}

// compile validates s, the step at index (0-based) of a script, and
// prepares it. Errors name the field at fault, not the step: the caller
// adds where the step is.
func compile(s Step, index int) (*compiled, error) {
	c := &compiled{delay: s.DeltaDelay, thinking: s.Thinking, streamArgs: s.StreamToolArgs, stop: s.StopReason}
	if s.DeltaDelay < 0 {
		return nil, fmt.Errorf("deltaDelay must be >= 0, got %s", s.DeltaDelay)
	}
	if s.StopReason != "" && !knownStopReason(s.StopReason) {
		return nil, fmt.Errorf("stopReason %q is not one of %s", s.StopReason, strings.Join(stopReasonNames(), ", "))
	}
	if err := s.Expect.validate(); err != nil {
		return nil, err
	}
	if s.Expect != nil {
		e := *s.Expect
		e.HasTools = slices.Clone(e.HasTools)
		c.expect = &e
	}
	if s.Error != nil {
		if other := s.contentFields(); len(other) > 0 {
			return nil, fmt.Errorf("an error step carries nothing else, but it also sets %s", strings.Join(other, ", "))
		}
		if s.Error.Message == "" {
			return nil, errors.New("error.message is required")
		}
		c.err = &helix.ModelError{
			Code:        cmp.Or(s.Error.Code, helix.CodeModelError),
			Message:     s.Error.Message,
			Recoverable: s.Error.Recoverable,
			StatusCode:  s.Error.StatusCode,
		}
		return c, nil
	}

	switch {
	case len(s.Deltas) > 0:
		joined := strings.Join(s.Deltas, "")
		if s.Text != "" && s.Text != joined {
			return nil, fmt.Errorf("text and deltas disagree: the deltas join to %q, text is %q (set one of them)", joined, s.Text)
		}
		c.text, c.deltas = joined, slices.Clone(s.Deltas)
	default:
		c.text, c.deltas = s.Text, SplitWords(s.Text)
	}

	for i, call := range s.ToolCalls {
		if call.Name == "" {
			return nil, fmt.Errorf("toolCalls[%d]: name is required", i)
		}
		if call.Name == helix.FinishToolName && s.Output != nil {
			return nil, fmt.Errorf("toolCalls[%d] calls %s and output is set too: use one of them", i, helix.FinishToolName)
		}
		args, err := objectJSON(call.Args)
		if err != nil {
			return nil, fmt.Errorf("toolCalls[%d] (%s): args %w", i, call.Name, err)
		}
		c.calls = append(c.calls, helix.ToolCall{ID: cmp.Or(call.ID, CallID(index, i)), Name: call.Name, Arguments: args})
	}
	if s.Output != nil {
		out, err := objectJSON(s.Output)
		if err != nil {
			return nil, fmt.Errorf("output %w", err)
		}
		c.calls = append(c.calls, helix.ToolCall{ID: CallID(index, len(c.calls)), Name: helix.FinishToolName, Arguments: out})
	}
	seen := map[string]int{}
	for i, call := range c.calls {
		if j, dup := seen[call.ID]; dup {
			return nil, fmt.Errorf("tool calls %d and %d share the ID %q", j, i, call.ID)
		}
		seen[call.ID] = i
	}

	if c.text == "" && len(c.calls) == 0 && s.StopReason == "" {
		return nil, errors.New("the step is empty: give it text, deltas, toolCalls, output or an error (or a stopReason for a deliberately empty answer)")
	}
	if c.stop == "" {
		c.stop = helix.StopEndTurn
		if len(c.calls) > 0 {
			c.stop = helix.StopToolUse
		}
	}
	if s.Usage != nil {
		u := *s.Usage
		c.usage = &u
	}
	return c, nil
}

// contentFields names the fields of s other than Error and Expect that are
// set.
func (s Step) contentFields() []string {
	var set []string
	add := func(on bool, name string) {
		if on {
			set = append(set, name)
		}
	}
	add(s.Text != "", "text")
	add(len(s.Deltas) > 0, "deltas")
	add(s.DeltaDelay != 0, "deltaDelay")
	add(s.Thinking != "", "thinking")
	add(len(s.ToolCalls) > 0, "toolCalls")
	add(s.Output != nil, "output")
	add(s.StreamToolArgs, "streamToolArgs")
	add(s.Usage != nil, "usage")
	add(s.StopReason != "", "stopReason")
	return set
}

func (e *Expect) validate() error {
	if e == nil {
		return nil
	}
	if e.LastRole != "" && !e.LastRole.Valid() {
		return fmt.Errorf("expect.lastRole %q is not a role (want system, user, assistant or tool)", e.LastRole)
	}
	for i, name := range e.HasTools {
		if name == "" {
			return fmt.Errorf("expect.hasTools[%d] is empty", i)
		}
	}
	return nil
}

// mismatches lists every way req differs from e.
func (e *Expect) mismatches(req helix.ModelRequest) []string {
	var diffs []string
	var last *helix.Message
	if n := len(req.Messages); n > 0 {
		last = &req.Messages[n-1]
	}
	if e.LastRole != "" {
		switch {
		case last == nil:
			diffs = append(diffs, fmt.Sprintf("the request has no messages, want a last message with role %q", e.LastRole))
		case last.Role != e.LastRole:
			diffs = append(diffs, fmt.Sprintf("the last message has role %q, want %q", last.Role, e.LastRole))
		}
	}
	if e.LastMessageContains != "" {
		switch {
		case last == nil:
			diffs = append(diffs, fmt.Sprintf("the request has no messages, want a last message containing %q", e.LastMessageContains))
		case !strings.Contains(last.Content, e.LastMessageContains):
			diffs = append(diffs, fmt.Sprintf("the last message (%s) does not contain %q: %q", last.Role, e.LastMessageContains, abbreviate(last.Content)))
		}
	}
	if e.ToolResultFor != "" {
		var got []string
		for _, m := range slices.Backward(req.Messages) {
			if m.Role == helix.RoleAssistant {
				break
			}
			if m.Role == helix.RoleTool {
				got = append(got, m.ToolName)
			}
		}
		if !slices.Contains(got, e.ToolResultFor) {
			slices.Reverse(got)
			diffs = append(diffs, fmt.Sprintf("no result of a %q call since the last assistant message (results for: %s)", e.ToolResultFor, listOrNone(got)))
		}
	}
	if len(e.HasTools) > 0 {
		offered := make([]string, len(req.Tools))
		for i, t := range req.Tools {
			offered[i] = t.Name
		}
		for _, name := range e.HasTools {
			if !slices.Contains(offered, name) {
				diffs = append(diffs, fmt.Sprintf("tool %q is not offered (tools: %s)", name, listOrNone(offered)))
			}
		}
	}
	return diffs
}

// CallID returns the default ID of the call at index call of the step at
// index step of a session's script: "call-<step>-<call>".
func CallID(step, call int) string { return fmt.Sprintf("call-%d-%d", step, call) }

// SplitWords splits text into the word-sized deltas a [Step] streams when it
// sets no Deltas: each delta is a word with the whitespace that follows it
// (leading whitespace joins the first word). Concatenating the deltas gives
// text back; an empty text has no deltas.
func SplitWords(text string) []string {
	var deltas []string
	start, inSpace, sawWord := 0, false, false
	for i, r := range text {
		space := unicode.IsSpace(r)
		if !space && inSpace && sawWord {
			deltas = append(deltas, text[start:i])
			start, sawWord = i, false
		}
		inSpace = space
		sawWord = sawWord || !space
	}
	if start < len(text) {
		deltas = append(deltas, text[start:])
	}
	return deltas
}

// splitArgs splits marshalled arguments into deltas of about argDeltaSize
// bytes, cutting only between runes so that every delta is valid UTF-8.
func splitArgs(args []byte) []string {
	const argDeltaSize = 16
	var deltas []string
	for len(args) > 0 {
		n := min(argDeltaSize, len(args))
		for n < len(args) && !utf8.RuneStart(args[n]) {
			n++
		}
		deltas = append(deltas, string(args[:n]))
		args = args[n:]
	}
	return deltas
}

// objectJSON marshals v, which must encode a JSON object; nil is {}.
func objectJSON(v any) (json.RawMessage, error) {
	var b []byte
	switch v := v.(type) {
	case nil:
		return json.RawMessage(`{}`), nil
	case json.RawMessage:
		if !json.Valid(v) {
			return nil, fmt.Errorf("are not valid JSON: %s", abbreviate(string(v)))
		}
		b = bytes.Clone(v)
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("do not marshal to JSON: %w", err)
		}
	}
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, fmt.Errorf("must be a JSON object, got %s", abbreviate(string(b)))
	}
	return b, nil
}

var stopReasons = []helix.StopReason{
	helix.StopEndTurn, helix.StopStopSequence, helix.StopToolUse, helix.StopMaxTokens,
	helix.StopContentFilter, helix.StopRefusal, helix.StopError, helix.StopUnknown,
}

func knownStopReason(r helix.StopReason) bool { return slices.Contains(stopReasons, r) }

func stopReasonNames() []string {
	names := make([]string, len(stopReasons))
	for i, r := range stopReasons {
		names[i] = string(r)
	}
	return names
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// abbreviate shortens s for an error message.
func abbreviate(s string) string {
	const limit = 80
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
