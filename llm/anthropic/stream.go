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
	// kinds is the type of each content block started, by index: deltas
	// of a block of a type this adapter does not keep are ignored.
	kinds map[int64]string
	// thinking is the reasoning forwarded, the text of every thinking
	// block; thoughts are the thinking and redacted_thinking blocks, in
	// order, and thoughtAt the thinking block of each index.
	thinking  strings.Builder
	thoughts  []*thought
	thoughtAt map[int64]*thought
	tools     map[int64]*toolUse
	calls     []*toolUse
	stop      string
	usage     struct{ input, output, cacheRead, cacheWrite int64 }
}

// Content block types this adapter keeps. Every other type (server tool
// calls and results such as server_tool_use, web_search_tool_result,
// web_fetch_tool_result, code_execution_tool_result, mcp_tool_use,
// mcp_tool_result, container_upload, and types added later) is dropped
// with its deltas: nothing in a helix.StepResult holds them.
const (
	blockText             = "text"
	blockThinking         = "thinking"
	blockRedactedThinking = "redacted_thinking"
	blockToolUse          = "tool_use"
)

// kept reports whether blocks of type kind are kept.
func kept(kind string) bool {
	switch kind {
	case blockText, blockThinking, blockRedactedThinking, blockToolUse:
		return true
	}
	return false
}

// thought is a thinking block (its text and signature) or a
// redacted_thinking block (its opaque data), as the API must get it back.
type thought struct {
	redacted  bool
	text      strings.Builder
	signature string
	data      string
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
		return a.startBlock(ev.Index, ev.ContentBlock)
	case "content_block_delta":
		return a.delta(ev.Index, ev.Delta)
	case "content_block_stop":
		if call := a.tools[ev.Index]; call != nil {
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

// startBlock applies a content_block_start event.
func (a *accumulator) startBlock(index int64, b sdk.ContentBlockStartEventContentBlockUnion) *provider.Failure {
	if a.kinds == nil {
		a.kinds = map[int64]string{}
	}
	a.kinds[index] = b.Type
	switch b.Type {
	case blockText:
		a.text(b.Text)
	case blockThinking:
		th := a.startThought(index)
		a.think(th, b.Thinking)
		if b.Signature != "" {
			th.signature = b.Signature
		}
	case blockRedactedThinking:
		// Nothing to show; the data goes back to the API as it came.
		a.thoughts = append(a.thoughts, &thought{redacted: true, data: b.Data})
	case blockToolUse:
		if b.Name == "" {
			return malformed(fmt.Sprintf("tool_use block %d has no name", index))
		}
		call := &toolUse{id: b.ID, name: b.Name, initial: b.JSON.Input.Raw()}
		if call.id == "" || a.idTaken(call.id) {
			call.id = fmt.Sprintf("toolu_%d", index)
			for n := 2; a.idTaken(call.id); n++ {
				call.id = fmt.Sprintf("toolu_%d_%d", index, n)
			}
		}
		if a.tools == nil {
			a.tools = map[int64]*toolUse{}
		}
		if prev := a.tools[index]; prev != nil {
			a.end(prev)
		}
		a.tools[index] = call
		a.calls = append(a.calls, call)
		a.forwarded = true
		a.cb.ToolArgStart(call.id, call.name)
	}
	return nil
}

// startThought starts a thinking block at index.
func (a *accumulator) startThought(index int64) *thought {
	th := &thought{}
	a.thoughts = append(a.thoughts, th)
	if a.thoughtAt == nil {
		a.thoughtAt = map[int64]*thought{}
	}
	a.thoughtAt[index] = th
	return th
}

// delta applies a content_block_delta event. A delta of a block of a type
// that is not kept (a server tool's input_json_delta, say) is ignored; one
// of a block never started is applied as its type implies, but for
// input_json_delta, which needs the tool_use block's start.
func (a *accumulator) delta(index int64, d sdk.MessageStreamEventUnionDelta) *provider.Failure {
	kind, started := a.kinds[index]
	if started && !kept(kind) {
		return nil
	}
	switch d.Type {
	case "text_delta":
		a.text(d.Text)
	case "thinking_delta", "signature_delta":
		th := a.thoughtAt[index]
		if th == nil {
			th = a.startThought(index)
		}
		if d.Type == "thinking_delta" {
			a.think(th, d.Thinking)
		} else {
			th.signature = d.Signature
		}
	case "input_json_delta":
		call := a.tools[index]
		if call == nil {
			what := "which was never started"
			if started {
				what = "which is a " + kind + " block"
			}
			return malformed(fmt.Sprintf("input_json_delta for block %d, %s", index, what))
		}
		if call.ended || d.PartialJSON == "" {
			return nil
		}
		call.args.WriteString(d.PartialJSON)
		a.cb.ToolArgDelta(call.id, d.PartialJSON)
	}
	// citations_delta and delta types added later carry nothing a
	// helix.StepResult holds.
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

// think forwards a piece of thinking block th. The first piece of a
// block after another block's text is preceded by a blank line, so that
// the blocks read apart in the forwarded (and the result's) reasoning.
func (a *accumulator) think(th *thought, s string) {
	if s == "" {
		return
	}
	a.forwarded = true
	if th.text.Len() == 0 && a.thinking.Len() > 0 {
		a.thinking.WriteString(thinkingSeparator)
		a.cb.Thinking(thinkingSeparator, false)
	}
	th.text.WriteString(s)
	a.thinking.WriteString(s)
	a.cb.Thinking(s, false)
}

// thinkingSeparator separates the text of thinking blocks in the
// forwarded reasoning.
const thinkingSeparator = "\n\n"

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
	res.Thinking = a.resultThinking()
	for _, c := range a.calls {
		a.end(c)
		res.ToolCalls = append(res.ToolCalls, helix.ToolCall{ID: c.id, Name: c.name, Arguments: provider.Arguments(c.args.String())})
	}
	if len(res.ToolCalls) > 0 {
		res.Type = helix.StepToolCalls
	}
	return res, nil
}

// resultThinking returns the step's reasoning: nil without thinking
// blocks, the block's text and signature for one thinking block (the
// common case, which round-trips as it always has). Several blocks, or a
// redacted_thinking block, cannot travel in one helix.Thinking as text and
// one signature: the API verifies each block's signature against that
// block's text and rejects a joined text with the last signature, for
// good. So Content holds the texts joined (for display) and Signature
// every block as the API must get it back (see encodeThoughts), which
// request mapping sends back block by block.
func (a *accumulator) resultThinking() *helix.Thinking {
	switch {
	case len(a.thoughts) == 0:
		return nil
	case len(a.thoughts) == 1 && !a.thoughts[0].redacted:
		return &helix.Thinking{Content: a.thinking.String(), Signature: a.thoughts[0].signature}
	}
	return &helix.Thinking{Content: a.thinking.String(), Signature: encodeThoughts(a.thoughts)}
}
