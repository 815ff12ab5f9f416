package aisdk

import (
	"encoding/json"
	"fmt"
	"strings"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/server/internal/redact"
	"github.com/helix-agents/helix-dbos/store"
)

// Translator turns the stored chunks of one conversation's stream into UI
// message stream chunks (the package documentation has the mapping). It is
// a pure state machine: feed it the chunks in sequence order with
// [Translator.Translate], and call [Translator.Close] before the finish
// chunk. IDs derive from stream sequences, so translating the same chunks
// gives the same output. Not safe for concurrent use.
type Translator struct {
	root      string
	errorText func(*helix.ErrorChunk) string
	output    bool

	text          string // ID of the open text part, "" when none
	reasoning     string // ID of the open reasoning part
	reasoningText string // incremental thinking streamed into the open reasoning part
	calls         map[callKey]*callState
	finishReason  string // of the last step_end
}

// callKey names a tool call: call IDs are unique within a session, and a
// sub-agent is another session.
type callKey struct{ agentID, callID string }

// callState is what the translator knows about one tool call.
type callState struct {
	name string
	// client: a client-executed call (the client runs it; providerExecuted
	// stays unset so the AI SDK calls onToolCall).
	client bool
	// announced: tool-input-available was written for it.
	announced bool
	// streaming: tool-input-start was written and the input is not
	// available yet.
	streaming bool
	// restart: the input stream must be opened again before its next delta
	// (after Reopen).
	restart bool
}

// TranslatorOptions refine a Translator; nil means the defaults.
type TranslatorOptions struct {
	// ErrorText turns a failed run's error chunk into the error chunk's
	// errorText. Default DefaultErrorText, which does not reveal the
	// error's message. (An internal failure's message is replaced with a
	// generic one before ErrorText sees it.)
	ErrorText func(*helix.ErrorChunk) string
	// StructuredOutput writes the run's output chunk as a data-output
	// part. Set it for an agent with an OutputSchema; an agent without one
	// outputs its final text, which the text parts already carry.
	StructuredOutput bool
}

// NewTranslator returns a translator for the stream of the conversation
// whose root session is rootSessionID.
func NewTranslator(rootSessionID string, opts *TranslatorOptions) *Translator {
	t := &Translator{root: rootSessionID, errorText: DefaultErrorText, calls: map[callKey]*callState{}}
	if opts != nil {
		if opts.ErrorText != nil {
			t.errorText = opts.ErrorText
		}
		t.output = opts.StructuredOutput
	}
	return t
}

// DefaultErrorText is the errorText of a failed run's error chunk: the
// error's code, not its message, which may carry a provider's or the
// database's words. (The AI SDK's own servers mask errors the same way.)
func DefaultErrorText(c *helix.ErrorChunk) string {
	code := c.Code
	if code == "" && c.ErrorDetail != nil {
		code = c.ErrorDetail.Code
	}
	if code == "" {
		return "The agent failed."
	}
	return "The agent failed (" + code + ")."
}

// FinishReason is the finish reason of the last step_end translated (stop,
// length, tool-calls, content-filter, error or other), or "" before any.
func (t *Translator) FinishReason() string { return t.finishReason }

// Close closes the open text and reasoning parts; call it before the finish
// chunk. Translating more chunks afterwards opens new parts.
func (t *Translator) Close() []Chunk {
	return t.closeReasoning(t.closeText(nil))
}

// Reopen prepares the translator to continue a stream for a client that
// received the chunks translated so far in another response (a reconnect
// from a sequence, or the continuation after a tool result): a text or
// reasoning part still open gets a new part, and a tool input still
// streaming is opened again, because the AI SDK rejects a delta for a part
// it does not have open. Call it after feeding the chunks the client has.
func (t *Translator) Reopen() {
	t.text, t.reasoning = "", ""
	for _, c := range t.calls {
		if c.streaming {
			c.restart = true
		}
	}
}

// isRoot reports whether the chunk was written by the conversation's root
// agent (a sub-agent's chunks carry its own session ID).
func (t *Translator) isRoot(b *helix.Base) bool {
	return b == nil || b.AgentID == "" || b.AgentID == t.root
}

// Translate returns the UI chunks of one stored chunk (often none). An
// internal failure's text (code internal_error: the engine's own error,
// possibly with SQL) never reaches the output: error and tool_end chunks
// go through the redaction package server applies to GET /sse too, before
// ErrorText sees them.
func (t *Translator) Translate(sc store.StoredChunk) []Chunk {
	if sc.Chunk == nil {
		return nil
	}
	b := sc.Chunk.ChunkBase()
	root := t.isRoot(b)
	agent := ""
	if b != nil {
		agent = b.AgentID
	}
	switch c := redact.Or(sc.Chunk).(type) {
	case *helix.TextDeltaChunk:
		if !root || c.Delta == "" {
			return nil
		}
		out := t.closeReasoning(nil)
		if t.text == "" {
			t.text = fmt.Sprintf("text-%d", sc.Sequence)
			out = append(out, Chunk{Type: TypeTextStart, ID: t.text})
		}
		return append(out, Chunk{Type: TypeTextDelta, ID: t.text, Delta: c.Delta})

	case *helix.ThinkingChunk:
		if !root {
			return nil
		}
		return t.thinking(sc.Sequence, c)

	case *helix.ToolArgStreamStartChunk:
		if !root {
			return nil
		}
		out := t.closeParts()
		call := t.call(agent, c.ToolCallID, c.ToolName)
		call.streaming = true
		return append(out, Chunk{Type: TypeToolInputStart, ToolCallID: c.ToolCallID, ToolName: c.ToolName})

	case *helix.ToolArgStreamDeltaChunk:
		call, ok := t.calls[callKey{agent, c.ToolCallID}]
		if !root || !ok || !call.streaming || c.Delta == "" {
			return nil
		}
		var out []Chunk
		if call.restart {
			call.restart = false
			out = append(out, Chunk{Type: TypeToolInputStart, ToolCallID: c.ToolCallID, ToolName: call.name})
		}
		return append(out, Chunk{Type: TypeToolInputDelta, ToolCallID: c.ToolCallID, InputTextDelta: c.Delta})

	case *helix.ToolStartChunk:
		client := c.ProviderExecuted != nil && !*c.ProviderExecuted
		// A sub-agent's server tools stay inside the sub-agent; its
		// client tools reach the user, who must run them.
		if !root && !client {
			return nil
		}
		call := t.call(agent, c.ToolCallID, c.ToolName)
		call.client = client
		return append(t.closeParts(), t.announce(c.ToolCallID, call, c.Arguments))

	case *helix.ToolApprovalRequestChunk:
		call := t.call(agent, c.ToolCallID, c.ToolName)
		out := t.closeParts()
		if !call.announced { // a sub-agent's gated call: its tool_start was not shown
			out = append(out, t.announce(c.ToolCallID, call, c.Input))
		}
		return append(out, Chunk{Type: TypeToolApprovalRequest, ApprovalID: c.ApprovalID, ToolCallID: c.ToolCallID,
			IsAutomatic: trueOrNil(c.IsAutomatic)})

	case *helix.ToolEndChunk:
		call, ok := t.calls[callKey{agent, c.ToolCallID}]
		if !ok || !call.announced {
			if !root {
				return nil
			}
			// A root call the client never saw start: show it, so the
			// result has a part to land on.
			call = t.call(agent, c.ToolCallID, c.ToolName)
			call.client = c.ProviderExecuted == nil || !*c.ProviderExecuted
			out := append(t.closeParts(), t.announce(c.ToolCallID, call, nil))
			return append(out, t.toolEnd(c, call))
		}
		return append(t.closeParts(), t.toolEnd(c, call))

	case *helix.ToolInputErrorChunk:
		if !root {
			return nil
		}
		call := t.call(agent, c.ToolCallID, c.ToolName)
		call.announced, call.streaming = true, false
		return append(t.closeParts(), Chunk{Type: TypeToolInputError, ToolCallID: c.ToolCallID, ToolName: c.ToolName,
			Input: orNull(c.PartialInput), ErrorText: nonEmpty(c.Error, "invalid tool input"), ProviderExecuted: t.executed(call)})

	case *helix.ToolOutputErrorChunk:
		call, ok := t.calls[callKey{agent, c.ToolCallID}]
		if !ok || !call.announced {
			return nil
		}
		return append(t.closeParts(), Chunk{Type: TypeToolOutputError, ToolCallID: c.ToolCallID,
			ErrorText: nonEmpty(c.Error, "invalid tool output"), ProviderExecuted: t.executed(call)})

	case *helix.StepStartChunk:
		if !root {
			return nil
		}
		return append(t.closeParts(), Chunk{Type: TypeStartStep})

	case *helix.StepEndChunk:
		if !root {
			return nil
		}
		if r := c.FinishReason; validFinishReason(r) {
			t.finishReason = r
		}
		return append(t.closeParts(), Chunk{Type: TypeFinishStep})

	case *helix.SourceURLChunk:
		if !root {
			return nil
		}
		return append(t.closeParts(), Chunk{Type: TypeSourceURL, SourceID: c.SourceID, URL: c.URL, Title: c.Title})

	case *helix.SourceDocumentChunk:
		if !root {
			return nil
		}
		return append(t.closeParts(), Chunk{Type: TypeSourceDocument, SourceID: c.SourceID, MediaType: c.MediaType,
			Title: nonEmpty(c.Title, nonEmpty(c.Filename, c.SourceID)), Filename: c.Filename})

	case *helix.FileChunk:
		if !root {
			return nil
		}
		return append(t.closeParts(), Chunk{Type: TypeFile, URL: c.URL, MediaType: c.MediaType})

	case *helix.CustomEventChunk:
		if !root || c.EventName == "" {
			return nil
		}
		return append(t.closeParts(), Chunk{Type: "data-" + c.EventName, Data: orNull(c.Data)})

	case *helix.SubAgentStartChunk:
		return append(t.closeParts(), Chunk{Type: TypeDataSubAgent, ID: c.CallID, Data: mustJSON(subAgentData{
			CallID: c.CallID, AgentType: c.SubAgentType, SessionID: c.SubSessionID, Status: "running"})})

	case *helix.SubAgentEndChunk:
		return append(t.closeParts(), Chunk{Type: TypeDataSubAgent, ID: c.CallID, Data: mustJSON(subAgentData{
			CallID: c.CallID, AgentType: c.SubAgentType, SessionID: c.SubSessionID, Status: "completed", Output: orNull(c.Result)})})

	case *helix.OutputChunk:
		if !root || !t.output {
			return nil
		}
		return append(t.closeParts(), Chunk{Type: TypeDataOutput, ID: "output", Data: orNull(c.Output)})

	case *helix.ErrorChunk:
		if !root {
			return nil // the sub-agent's failure reaches the parent as its tool's error
		}
		return append(t.closeParts(), Chunk{Type: TypeError, ErrorText: nonEmpty(t.errorText(c), "The agent failed.")})

	case *helix.StreamResyncChunk:
		if !root {
			return nil
		}
		return append(t.closeParts(), Chunk{Type: TypeDataResync, Transient: true, Data: mustJSON(resyncData{
			Reason: c.Reason, FromSequence: c.FromSequence, CheckpointID: c.CheckpointID})})

	case *helix.RunInterruptedChunk, *helix.StreamEnd:
		return t.closeParts()
	}
	// Bookkeeping chunks (state_patch, checkpoint_created, step_committed,
	// step_discarded, run_resumed, run_paused, executor_superseded,
	// suspension_marker, tool_arg_stream_end) and tool_approval_response
	// (AI SDK 6 has no chunk for it; the tool's outcome follows) have no UI
	// counterpart.
	return nil
}

// subAgentData is the data of a data-subagent part (one per sub-agent call,
// updated in place by its end).
type subAgentData struct {
	CallID    string          `json:"callId"`
	AgentType string          `json:"agentType"`
	SessionID string          `json:"sessionId"`
	Status    string          `json:"status"`
	Output    json.RawMessage `json:"output,omitempty"`
}

// resyncData is the data of a transient data-helix-resync part.
type resyncData struct {
	Reason       string `json:"reason"`
	FromSequence int64  `json:"fromSequence"`
	CheckpointID string `json:"checkpointId,omitempty"`
}

// thinking maps reasoning: incremental pieces stream into one reasoning
// part; a complete block closes it (adding what the pieces did not carry)
// or, without pieces, is a part of its own.
func (t *Translator) thinking(seq int64, c *helix.ThinkingChunk) []Chunk {
	out := t.closeText(nil)
	open := func() {
		if t.reasoning == "" {
			t.reasoning = fmt.Sprintf("reasoning-%d", seq)
			t.reasoningText = ""
			out = append(out, Chunk{Type: TypeReasoningStart, ID: t.reasoning})
		}
	}
	if !c.IsComplete {
		if c.Content == "" {
			return out
		}
		open()
		t.reasoningText += c.Content
		return append(out, Chunk{Type: TypeReasoningDelta, ID: t.reasoning, Delta: c.Content})
	}
	rest := c.Content
	if t.reasoning != "" {
		// The block repeats what was streamed: send only what is new.
		rest = strings.TrimPrefix(c.Content, t.reasoningText)
	}
	if rest != "" {
		open()
		out = append(out, Chunk{Type: TypeReasoningDelta, ID: t.reasoning, Delta: rest})
	}
	return t.closeReasoning(out)
}

func (t *Translator) call(agentID, id, name string) *callState {
	k := callKey{agentID, id}
	c, ok := t.calls[k]
	if !ok {
		c = &callState{name: name}
		t.calls[k] = c
	}
	if c.name == "" {
		c.name = name
	}
	return c
}

// announce is the tool-input-available of a call.
func (t *Translator) announce(id string, c *callState, input json.RawMessage) Chunk {
	c.announced, c.streaming, c.restart = true, false, false
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	return Chunk{Type: TypeToolInputAvailable, ToolCallID: id, ToolName: c.name, Input: input, ProviderExecuted: t.executed(c)}
}

// toolEnd is the outcome of a call: its output, its error, or a denial.
func (t *Translator) toolEnd(c *helix.ToolEndChunk, call *callState) Chunk {
	switch {
	case c.ErrorCode == notApproved:
		return Chunk{Type: TypeToolOutputDenied, ToolCallID: c.ToolCallID}
	case c.Error != "" || c.ErrorCode != "":
		return Chunk{Type: TypeToolOutputError, ToolCallID: c.ToolCallID, ErrorText: nonEmpty(c.Error, c.ErrorCode),
			ProviderExecuted: t.executed(call)}
	}
	return Chunk{Type: TypeToolOutputAvailable, ToolCallID: c.ToolCallID, Output: orNull(c.Result), ProviderExecuted: t.executed(call)}
}

// notApproved is the tool_end error code of a denied call.
const notApproved = "not_approved"

// executed is the providerExecuted flag of a call's chunks: true for calls
// the server runs, unset for client-executed ones (so that the AI SDK runs
// onToolCall for them and its lastAssistantMessageIsCompleteWithToolCalls
// waits only for them).
func (t *Translator) executed(c *callState) *bool {
	if c.client {
		return nil
	}
	yes := true
	return &yes
}

func (t *Translator) closeParts() []Chunk { return t.closeReasoning(t.closeText(nil)) }

func (t *Translator) closeText(out []Chunk) []Chunk {
	if t.text != "" {
		out = append(out, Chunk{Type: TypeTextEnd, ID: t.text})
		t.text = ""
	}
	return out
}

func (t *Translator) closeReasoning(out []Chunk) []Chunk {
	if t.reasoning != "" {
		out = append(out, Chunk{Type: TypeReasoningEnd, ID: t.reasoning})
		t.reasoning, t.reasoningText = "", ""
	}
	return out
}

func validFinishReason(r string) bool {
	switch r {
	case FinishStop, FinishLength, FinishContentFilter, FinishToolCalls, FinishError, FinishOther:
		return true
	}
	return false
}

func orNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

func nonEmpty(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}

func trueOrNil(b *bool) *bool {
	if b == nil || !*b {
		return nil
	}
	return b
}

// mustJSON marshals values that cannot fail to marshal (plain structs of
// strings, numbers and valid raw JSON).
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("aisdk: marshal %T: %v", v, err))
	}
	return b
}
