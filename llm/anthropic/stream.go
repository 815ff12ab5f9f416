package anthropic

import (
	"fmt"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/packages/ssestream"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/internal/provider"
)

// accumulator consumes one streamed message, forwards its deltas and
// builds the step result.
type accumulator struct {
	cb     helix.StreamCallbacks
	apiKey string
	// forwarded is set once any delta went to the callbacks; the attempt
	// can no longer be retried silently.
	forwarded bool
	events    int
	stopped   bool // message_stop seen
	model     string
	content   strings.Builder
	thinking  strings.Builder
	signature string
	thought   bool // a thinking block was seen
	blocks    map[int64]*toolUse
	calls     []*toolUse
	stop      string
	usage     struct{ input, output, cacheRead, cacheWrite int64 }
}

// toolUse is a tool_use block being streamed.
type toolUse struct {
	id, name string
	args     strings.Builder
	// initial is the raw input of the block's start event.
	initial string
	ended   bool
}

// consume reads the stream to its end. A stream is complete only at its
// message_stop event.
func (a *accumulator) consume(s *ssestream.Stream[sdk.MessageStreamEventUnion]) (helix.StepResult, *provider.Failure) {
	for s.Next() {
		a.events++
		if f := a.handle(s.Current()); f != nil {
			return helix.StepResult{}, f
		}
		if a.stopped {
			return a.result()
		}
	}
	if err := s.Err(); err != nil {
		return helix.StepResult{}, sdkFailure(err, a.events > 0, a.apiKey)
	}
	return helix.StepResult{}, provider.NewFailure(helix.CodeProviderUnavailable, true, 0, fmt.Sprintf(
		"anthropic: the stream ended before its message_stop event, after %d events: the connection or the API broke off; the step can be run again", a.events))
}

// handle applies one event. The SDK has already dropped ping events and
// turned error events into the stream's error.
func (a *accumulator) handle(ev sdk.MessageStreamEventUnion) *provider.Failure {
	switch ev.Type {
	case "message_start":
		a.model = ev.Message.Model
		u := ev.Message.Usage
		a.usage.input, a.usage.output = u.InputTokens, u.OutputTokens
		a.usage.cacheRead, a.usage.cacheWrite = u.CacheReadInputTokens, u.CacheCreationInputTokens
	case "content_block_start":
		b := ev.ContentBlock
		switch b.Type {
		case "text":
			a.text(b.Text)
		case "thinking":
			a.thought = true
			a.think(b.Thinking)
			if b.Signature != "" {
				a.signature = b.Signature
			}
		case "tool_use":
			if b.Name == "" {
				return malformed(fmt.Sprintf("tool_use block %d has no name", ev.Index))
			}
			call := &toolUse{id: b.ID, name: b.Name, initial: b.JSON.Input.Raw()}
			if call.id == "" || a.idTaken(call.id) {
				call.id = fmt.Sprintf("toolu_%d", ev.Index)
				for n := 2; a.idTaken(call.id); n++ {
					call.id = fmt.Sprintf("toolu_%d_%d", ev.Index, n)
				}
			}
			if a.blocks == nil {
				a.blocks = map[int64]*toolUse{}
			}
			if prev := a.blocks[ev.Index]; prev != nil {
				a.end(prev)
			}
			a.blocks[ev.Index] = call
			a.calls = append(a.calls, call)
			a.forwarded = true
			a.cb.ToolArgStart(call.id, call.name)
		}
		// redacted_thinking, server tool blocks and future types are
		// skipped: nothing in a helix.StepResult holds them.
	case "content_block_delta":
		d := ev.Delta
		switch d.Type {
		case "text_delta":
			a.text(d.Text)
		case "thinking_delta":
			a.thought = true
			a.think(d.Thinking)
		case "signature_delta":
			a.thought = true
			a.signature = d.Signature
		case "input_json_delta":
			call := a.blocks[ev.Index]
			if call == nil {
				return malformed(fmt.Sprintf("input_json_delta for block %d, which is not a tool_use block", ev.Index))
			}
			if call.ended || d.PartialJSON == "" {
				return nil
			}
			call.args.WriteString(d.PartialJSON)
			a.cb.ToolArgDelta(call.id, d.PartialJSON)
		}
	case "content_block_stop":
		if call := a.blocks[ev.Index]; call != nil {
			a.end(call)
		}
	case "message_delta":
		if ev.Delta.StopReason != "" {
			a.stop = string(ev.Delta.StopReason)
		}
		// The final usage; recent API versions repeat the input counts.
		u := ev.Usage
		if u.JSON.OutputTokens.Valid() {
			a.usage.output = u.OutputTokens
		}
		if u.JSON.InputTokens.Valid() {
			a.usage.input = u.InputTokens
		}
		if u.JSON.CacheReadInputTokens.Valid() {
			a.usage.cacheRead = u.CacheReadInputTokens
		}
		if u.JSON.CacheCreationInputTokens.Valid() {
			a.usage.cacheWrite = u.CacheCreationInputTokens
		}
	case "message_stop":
		a.stopped = true
	}
	return nil
}

func (a *accumulator) text(s string) {
	if s == "" {
		return
	}
	a.forwarded = true
	a.content.WriteString(s)
	a.cb.TextDelta(s)
}

func (a *accumulator) think(s string) {
	if s == "" {
		return
	}
	a.forwarded = true
	a.thinking.WriteString(s)
	a.cb.Thinking(s, false)
}

// end reports the end of a call's arguments. A call whose arguments came
// whole in its start event (never on the API, which starts with {} and
// streams the rest) gets them as one delta first.
func (a *accumulator) end(call *toolUse) {
	if call.ended {
		return
	}
	if strings.TrimSpace(call.args.String()) == "" {
		if init := strings.TrimSpace(call.initial); init != "" && init != "{}" && init != "null" {
			call.args.WriteString(init)
			a.cb.ToolArgDelta(call.id, init)
		}
	}
	call.ended = true
	a.cb.ToolArgEnd(call.id)
}

func (a *accumulator) idTaken(id string) bool {
	for _, c := range a.calls {
		if c.id == id {
			return true
		}
	}
	return false
}

// result builds the step result after message_stop.
func (a *accumulator) result() (helix.StepResult, *provider.Failure) {
	res := helix.StepResult{
		Type:       helix.StepText,
		Content:    a.content.String(),
		Model:      a.model,
		StopReason: helix.MapAnthropicStopReason(a.stop),
		Usage: helix.Usage{
			// InputTokens counts every prompt token, as OpenAI's
			// prompt_tokens does: the API's input_tokens excludes the
			// tokens read from or written to the cache.
			InputTokens:      int(a.usage.input + a.usage.cacheRead + a.usage.cacheWrite),
			OutputTokens:     int(a.usage.output),
			CachedTokens:     int(a.usage.cacheRead),
			CacheWriteTokens: int(a.usage.cacheWrite),
		},
	}
	if a.thought {
		res.Thinking = &helix.Thinking{Content: a.thinking.String(), Signature: a.signature}
	}
	for _, c := range a.calls {
		a.end(c)
		res.ToolCalls = append(res.ToolCalls, helix.ToolCall{ID: c.id, Name: c.name, Arguments: provider.Arguments(c.args.String())})
	}
	if len(res.ToolCalls) > 0 {
		res.Type = helix.StepToolCalls
	}
	return res, nil
}
