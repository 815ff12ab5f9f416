package openai

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/internal/provider"
)

// maxEventSize bounds one server-sent event (and one line), so a server
// that never sends a newline cannot exhaust memory.
const maxEventSize = 16 << 20

// errEventTooLarge reports an event over maxEventSize.
var errEventTooLarge = errors.New("event larger than 16 MiB")

// sseReader reads server-sent events (the text/event-stream format): data
// lines joined with newlines, dispatched at a blank line; comments
// (": OPENROUTER PROCESSING"), id and retry fields ignored.
type sseReader struct {
	r    *bufio.Reader
	line []byte
	eof  bool // the body ended after the line last returned
}

func newSSEReader(r io.Reader) *sseReader { return &sseReader{r: bufio.NewReaderSize(r, 64<<10)} }

// next returns the next event's type and data. At the end of the body it
// returns io.EOF; an unfinished last event is dropped (as the format
// requires) unless it is the [DONE] terminator, which some servers send
// without the final blank line.
func (s *sseReader) next() (event string, data []byte, err error) {
	hasData := false
	for {
		line, err := s.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) && hasData && isDone(data) {
				return event, data, nil
			}
			return "", nil, err
		}
		if len(line) == 0 {
			if hasData {
				return event, data, nil
			}
			event = ""
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
			if len(data) > maxEventSize {
				return "", nil, errEventTooLarge
			}
		case "event":
			event = string(value)
		}
	}
}

// readLine returns the next line without its line ending (\n or \r\n),
// a last line without one included. The slice is valid until the next
// call.
func (s *sseReader) readLine() ([]byte, error) {
	if s.eof {
		return nil, io.EOF
	}
	s.line = s.line[:0]
	for {
		chunk, err := s.r.ReadSlice('\n')
		s.line = append(s.line, chunk...)
		if len(s.line) > maxEventSize {
			return nil, errEventTooLarge
		}
		switch {
		case err == nil:
			return bytes.TrimSuffix(s.line[:len(s.line)-1], []byte("\r")), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(s.line) > 0:
			s.eof = true
			return bytes.TrimSuffix(s.line, []byte("\r")), nil
		default:
			return nil, err
		}
	}
}

func isDone(data []byte) bool { return string(bytes.TrimSpace(data)) == "[DONE]" }

// wireChunk is one chat.completion.chunk, with the fields of the
// compatible servers this adapter reads.
type wireChunk struct {
	Object  string          `json:"object"`
	Model   string          `json:"model"`
	Choices []wireChoice    `json:"choices"`
	Usage   *wireUsage      `json:"usage"`
	Error   json.RawMessage `json:"error"`
	// Message, Type and Code are set by servers that send a bare error
	// object ({"object":"error",…}) in the stream.
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
}

type wireChoice struct {
	Index        int       `json:"index"`
	Delta        wireDelta `json:"delta"`
	FinishReason *string   `json:"finish_reason"`
}

type wireDelta struct {
	Content string `json:"content"`
	Refusal string `json:"refusal"`
	// ReasoningContent (DeepSeek, vLLM, llama.cpp) and Reasoning
	// (OpenRouter, Ollama, recent vLLM) carry reasoning; Reasoning is not a
	// string everywhere, hence raw.
	ReasoningContent string          `json:"reasoning_content"`
	Reasoning        json.RawMessage `json:"reasoning"`
	ToolCalls        []wireCallDelta `json:"tool_calls"`
}

type wireCallDelta struct {
	// Index identifies the call across fragments; a few servers omit it.
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name string `json:"name"`
		// Arguments is a string fragment (an object on a few servers).
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type wireUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	// PromptCacheHitTokens is DeepSeek's count of cached prompt tokens.
	PromptCacheHitTokens int `json:"prompt_cache_hit_tokens"`
}

// stream accumulates one streamed response and forwards its deltas.
type stream struct {
	cb       helix.StreamCallbacks
	endpoint string // for messages
	apiKey   string // redacted from messages
	// forwarded is set once any delta was produced for the callbacks; the
	// attempt can no longer be retried silently.
	forwarded bool
	content   strings.Builder
	reasoning strings.Builder
	calls     []*toolCall
	finish    string
	refusal   bool
	usage     *wireUsage
	model     string
	events    int
}

type toolCall struct {
	index int
	// wireID is the ID the server sent, which tells the calls of one
	// index apart; id is the call's ID in the result, wireID made unique
	// (see startCall).
	wireID, id     string
	name           string
	args           strings.Builder
	started, ended bool
}

// read consumes the body up to [DONE] and returns the result, or the
// failure that ended it.
func (s *stream) read(body io.Reader) (helix.StepResult, *provider.Failure) {
	r := newSSEReader(body)
	for {
		event, data, err := r.next()
		switch {
		case errors.Is(err, io.EOF):
			return helix.StepResult{}, provider.NewFailure(helix.CodeProviderUnavailable, true, 0, fmt.Sprintf(
				"openai: the stream ended before its [DONE] terminator, after %d events: the connection or the provider broke off; the step can be run again", s.events))
		case errors.Is(err, errEventTooLarge):
			return helix.StepResult{}, malformed("an event is larger than 16 MiB", nil)
		case err != nil:
			return helix.StepResult{}, transportFailure(s.endpoint, err, true, s.apiKey)
		}
		s.events++
		if isDone(data) {
			return s.result()
		}
		if f := s.handle(event, data); f != nil {
			return helix.StepResult{}, f
		}
	}
}

// handle applies one event.
func (s *stream) handle(event string, data []byte) *provider.Failure {
	if event == "error" {
		info, ok := parseErrorBody(data)
		if !ok {
			info.Message = provider.Snippet(string(data))
		}
		return eventFailure(info, s.apiKey)
	}
	var c wireChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return malformed(err.Error(), data)
	}
	if len(c.Error) > 0 && string(c.Error) != "null" || c.Object == "error" {
		info, _ := parseErrorBody(data)
		return eventFailure(info, s.apiKey)
	}
	if c.Model != "" {
		s.model = c.Model
	}
	if c.Usage != nil {
		s.usage = c.Usage
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue // only the first choice is read (n > 1 is not supported)
		}
		d := ch.Delta
		if r := reasoningOf(d); r != "" {
			s.forwarded = true
			s.reasoning.WriteString(r)
			s.cb.Thinking(r, false)
		}
		for _, text := range []string{d.Content, d.Refusal} {
			if text != "" {
				s.forwarded = true
				s.content.WriteString(text)
				s.cb.TextDelta(text)
			}
		}
		if d.Refusal != "" {
			s.refusal = true
		}
		for _, tc := range d.ToolCalls {
			s.toolDelta(tc)
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			s.finish = *ch.FinishReason
			s.endCalls()
		}
	}
	return nil
}

func reasoningOf(d wireDelta) string {
	if d.ReasoningContent != "" {
		return d.ReasoningContent
	}
	var s string
	if len(d.Reasoning) > 0 && json.Unmarshal(d.Reasoning, &s) == nil {
		return s
	}
	return ""
}

// toolDelta applies one fragment of a streamed tool call. Fragments carry
// the call's index; the first one its ID and name, all of them pieces of
// the arguments (split anywhere, mid-JSON included).
//
// Several servers (Ollama, LiteLLM, SGLang) send parallel calls whole, one
// per fragment, all with index 0 and each with its own ID: see newCallAt.
// A fragment without an ID, or repeating its call's, continues the call.
func (s *stream) toolDelta(d wireCallDelta) {
	var c *toolCall
	if d.Index != nil {
		for _, x := range slices.Backward(s.calls) {
			if x.index == *d.Index {
				c = x
				break
			}
		}
		if c != nil && newCallAt(c, d) {
			s.endCall(c)
			c = nil
		}
	} else if n := len(s.calls); n > 0 && (d.ID == "" || d.ID == s.calls[n-1].wireID) {
		// No index: a fragment without a new ID continues the last call.
		c = s.calls[n-1]
	}
	if c == nil {
		index := len(s.calls)
		if d.Index != nil {
			index = *d.Index
		}
		c = &toolCall{index: index}
		s.calls = append(s.calls, c)
	}
	if c.ended {
		return // a fragment after the finish reason: ignored
	}
	if c.wireID == "" {
		c.wireID = d.ID
	}
	if !c.started {
		if c.id == "" {
			c.id = d.ID
		}
		if c.name == "" {
			c.name = d.Function.Name
		}
	}
	frag := argumentsFragment(d.Function.Arguments)
	c.args.WriteString(frag)
	switch {
	case !c.started && c.name != "":
		// Fragments that came before the name are sent with the start.
		s.startCall(c)
		if c.args.Len() > 0 {
			s.cb.ToolArgDelta(c.id, c.args.String())
		}
	case c.started && frag != "":
		s.cb.ToolArgDelta(c.id, frag)
	}
}

// newCallAt reports whether fragment d, of the index of call c, starts
// another call rather than continuing c: it carries an ID other than the
// one c started with and a function name, and c's arguments are complete
// (a JSON document, or nothing for a call without arguments). That is what servers sending every call with index 0
// (Ollama, LiteLLM, SGLang) look like. A different ID alone is not
// enough: a few servers send a new ID with every fragment of one call
// (the first with the name, the rest with pieces of the arguments), which
// must stay one call.
func newCallAt(c *toolCall, d wireCallDelta) bool {
	return d.ID != "" && c.wireID != "" && d.ID != c.wireID && d.Function.Name != "" &&
		c.started && (strings.TrimSpace(c.args.String()) == "" || json.Valid([]byte(c.args.String())))
}

// startCall gives c a unique ID (servers that omit it, or repeat one, get
// call_<index>) and reports its start.
func (s *stream) startCall(c *toolCall) {
	c.started = true
	s.forwarded = true
	if c.id == "" || s.idTaken(c) {
		base := c.id
		if base == "" {
			base = "call"
		}
		c.id = fmt.Sprintf("%s_%d", base, c.index)
		for n := 2; s.idTaken(c); n++ {
			c.id = fmt.Sprintf("%s_%d_%d", base, c.index, n)
		}
	}
	s.cb.ToolArgStart(c.id, c.name)
}

func (s *stream) idTaken(c *toolCall) bool {
	for _, x := range s.calls {
		if x != c && x.started && x.id == c.id {
			return true
		}
	}
	return false
}

// endCalls reports the end of every started call.
func (s *stream) endCalls() {
	for _, c := range s.calls {
		s.endCall(c)
	}
}

// endCall reports the end of c when it started and has not ended. A call
// that never started (no name yet) is left open: result reports it.
func (s *stream) endCall(c *toolCall) {
	if c.started && !c.ended {
		c.ended = true
		s.cb.ToolArgEnd(c.id)
	}
}

// argumentsFragment returns a fragment's text: a JSON string's value, or
// the raw JSON of an object some servers send whole.
func argumentsFragment(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// result builds the step result after [DONE].
func (s *stream) result() (helix.StepResult, *provider.Failure) {
	s.endCalls()
	res := helix.StepResult{Type: helix.StepText, Content: s.content.String(), Model: s.model,
		StopReason: helix.MapOpenAIFinishReason(s.finish)}
	if s.reasoning.Len() > 0 {
		res.Thinking = &helix.Thinking{Content: s.reasoning.String()}
	}
	for _, c := range s.calls {
		if !c.started {
			return helix.StepResult{}, malformed(fmt.Sprintf("tool call %d has no function name", c.index), nil)
		}
		res.ToolCalls = append(res.ToolCalls, helix.ToolCall{ID: c.id, Name: c.name, Arguments: provider.Arguments(c.args.String())})
	}
	if len(res.ToolCalls) > 0 {
		res.Type = helix.StepToolCalls
		// Some servers (older Ollama) finish tool calls with "stop".
		if res.StopReason == helix.StopEndTurn || res.StopReason == helix.StopUnknown {
			res.StopReason = helix.StopToolUse
		}
	}
	if s.refusal && res.StopReason == helix.StopEndTurn {
		res.StopReason = helix.StopRefusal
	}
	if u := s.usage; u != nil {
		res.Usage = helix.Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, CachedTokens: u.PromptCacheHitTokens}
		if u.PromptTokensDetails != nil && u.PromptTokensDetails.CachedTokens > 0 {
			res.Usage.CachedTokens = u.PromptTokensDetails.CachedTokens
		}
	}
	return res, nil
}
