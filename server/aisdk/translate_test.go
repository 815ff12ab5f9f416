package aisdk_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/server/aisdk"
	"github.com/helix-agents/helix-dbos/server/internal/redact"
	"github.com/helix-agents/helix-dbos/store"
)

var update = flag.Bool("update", false, "rewrite the golden files of the translator tests")

const root = "sess-1"

func rb(step int) helix.Base { return helix.Base{AgentID: root, AgentType: "chat", Step: step} }
func sb(step int) helix.Base {
	return helix.Base{AgentID: root + "-sub-call-9", AgentType: "checker", Step: step}
}

// stored numbers chunks from 1, as a stream does.
func stored(chunks ...helix.Chunk) []store.StoredChunk {
	out := make([]store.StoredChunk, len(chunks))
	for i, c := range chunks {
		out[i] = store.StoredChunk{StreamID: root, Sequence: int64(i + 1), RunID: "run-1", Chunk: c}
	}
	return out
}

// translate runs the chunks through a translator and closes it, as one
// response does.
func translate(t *testing.T, chunks []store.StoredChunk) []aisdk.Chunk {
	t.Helper()
	tr := aisdk.NewTranslator(root, &aisdk.TranslatorOptions{StructuredOutput: true})
	var out []aisdk.Chunk
	for _, c := range chunks {
		out = append(out, tr.Translate(c)...)
	}
	return append(out, tr.Close()...)
}

// golden compares the chunks, one JSON object per line, with
// testdata/<name>.jsonl (go test -run TestTranslate -update rewrites them).
func golden(t *testing.T, name string, chunks []aisdk.Chunk) {
	t.Helper()
	var buf bytes.Buffer
	for _, c := range chunks {
		b, err := json.Marshal(c)
		require.NoError(t, err)
		buf.Write(b)
		buf.WriteByte('\n')
	}
	path := filepath.Join("testdata", name+".jsonl")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run with -update to create the golden file")
	require.Equal(t, string(want), buf.String())
}

func TestTranslateTextAndServerTool(t *testing.T) {
	t.Parallel()
	golden(t, "text_and_server_tool", translate(t, stored(
		&helix.StepStartChunk{Base: rb(1), StepID: "run-1:1"},
		&helix.TextDeltaChunk{Base: rb(1), Delta: "Let me "},
		&helix.TextDeltaChunk{Base: rb(1), Delta: "check."},
		&helix.TextDeltaChunk{Base: rb(1), Delta: ""}, // empty deltas are dropped
		&helix.ToolStartChunk{Base: rb(1), ToolCallID: "c1", ToolName: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)},
		&helix.ToolEndChunk{Base: rb(1), ToolCallID: "c1", ToolName: "get_weather", Result: json.RawMessage(`{"forecast":"sunny"}`), ProviderExecuted: new(true)},
		&helix.StatePatchChunk{Base: rb(1), Patches: []helix.PatchOp{}},
		&helix.StepEndChunk{Base: rb(1), StepID: "run-1:1", FinishReason: "tool-calls"},
		&helix.StepCommittedChunk{Base: rb(1), RunID: "run-1", StepID: "run-1:1", CheckpointID: "cp"},
		&helix.StepStartChunk{Base: rb(2)},
		&helix.TextDeltaChunk{Base: rb(2), Delta: "Sunny."},
		&helix.StepEndChunk{Base: rb(2), FinishReason: "stop"},
		&helix.StreamEnd{StreamID: root},
	)))
}

// A client-executed tool: its tool-input-available carries no
// providerExecuted (useChat runs onToolCall), and the result the client
// submitted comes back as its output, without providerExecuted either.
func TestTranslateClientTool(t *testing.T) {
	t.Parallel()
	golden(t, "client_tool", translate(t, stored(
		&helix.StepStartChunk{Base: rb(1)},
		&helix.ToolStartChunk{Base: rb(1), ToolCallID: "c1", ToolName: "ask_user", Arguments: json.RawMessage(`{"question":"colour?"}`), ProviderExecuted: new(false)},
		&helix.ToolEndChunk{Base: rb(1), ToolCallID: "c1", ToolName: "ask_user", Result: json.RawMessage(`{"answer":"blue"}`), ProviderExecuted: new(false)},
		&helix.ToolStartChunk{Base: rb(1), ToolCallID: "c2", ToolName: "ask_user", Arguments: json.RawMessage(`{"question":"size?"}`), ProviderExecuted: new(false)},
		&helix.ToolEndChunk{Base: rb(1), ToolCallID: "c2", ToolName: "ask_user", Result: json.RawMessage(`null`), Error: "the client tool failed", ErrorCode: helix.CodeClientToolError, ProviderExecuted: new(false)},
		&helix.StepEndChunk{Base: rb(1), FinishReason: "tool-calls"},
	)))
}

// Approval-gated calls: the request follows the call's input; an approved
// call's output arrives as any tool's, a denied one is tool-output-denied;
// the approval response itself has no AI SDK 6 chunk.
func TestTranslateApprovals(t *testing.T) {
	t.Parallel()
	golden(t, "approvals", translate(t, stored(
		&helix.StepStartChunk{Base: rb(1)},
		&helix.TextDeltaChunk{Base: rb(1), Delta: "Transferring."},
		&helix.ToolStartChunk{Base: rb(1), ToolCallID: "c1", ToolName: "transfer", Arguments: json.RawMessage(`{"to":"bob","amount":5}`)},
		&helix.ToolStartChunk{Base: rb(1), ToolCallID: "c2", ToolName: "transfer", Arguments: json.RawMessage(`{"to":"eve","amount":500}`)},
		&helix.ToolApprovalRequestChunk{Base: rb(1), ToolCallID: "c1", ToolName: "transfer", ApprovalID: "run-1::c1", Input: json.RawMessage(`{"to":"bob","amount":5}`)},
		&helix.ToolApprovalRequestChunk{Base: rb(1), ToolCallID: "c2", ToolName: "transfer", ApprovalID: "run-1::c2", Input: json.RawMessage(`{"to":"eve","amount":500}`), IsAutomatic: new(false)},
		&helix.ToolApprovalResponseChunk{Base: rb(1), ToolCallID: "c1", ToolName: "transfer", ApprovalID: "run-1::c1", Approved: true},
		&helix.ToolApprovalResponseChunk{Base: rb(1), ToolCallID: "c2", ToolName: "transfer", ApprovalID: "run-1::c2", Approved: false, Reason: "too much"},
		&helix.ToolEndChunk{Base: rb(1), ToolCallID: "c2", ToolName: "transfer", Result: json.RawMessage(`null`), Error: helix.NotApprovedMessage, ErrorCode: "not_approved", ProviderExecuted: new(true)},
		&helix.ToolEndChunk{Base: rb(1), ToolCallID: "c1", ToolName: "transfer", Result: json.RawMessage(`{"sent":5}`), ProviderExecuted: new(true)},
		&helix.StepEndChunk{Base: rb(1), FinishReason: "tool-calls"},
	)))
}

// Reasoning: streamed pieces fill one part and a complete block closes it
// with only what the pieces lacked; a complete block alone is a part.
// Streamed tool arguments open the tool part early.
func TestTranslateReasoningAndToolArgs(t *testing.T) {
	t.Parallel()
	golden(t, "reasoning_and_tool_args", translate(t, stored(
		&helix.StepStartChunk{Base: rb(1)},
		&helix.ThinkingChunk{Base: rb(1), Content: "The user "},
		&helix.ThinkingChunk{Base: rb(1), Content: "wants weather"},
		&helix.ThinkingChunk{Base: rb(1), Content: "The user wants weather.", IsComplete: true},
		&helix.TextDeltaChunk{Base: rb(1), Delta: "Checking."},
		&helix.ThinkingChunk{Base: rb(1), Content: "Use the tool.", IsComplete: true},
		&helix.ToolArgStreamStartChunk{Base: rb(1), ToolCallID: "c1", ToolName: "get_weather"},
		&helix.ToolArgStreamDeltaChunk{Base: rb(1), ToolCallID: "c1", Delta: `{"city":`},
		&helix.ToolArgStreamDeltaChunk{Base: rb(1), ToolCallID: "c1", Delta: `"Paris"}`},
		&helix.ToolArgStreamEndChunk{Base: rb(1), ToolCallID: "c1"},
		&helix.ToolStartChunk{Base: rb(1), ToolCallID: "c1", ToolName: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)},
		&helix.ToolEndChunk{Base: rb(1), ToolCallID: "c1", ToolName: "get_weather", Result: json.RawMessage(`"sunny"`), Error: "upstream down", ProviderExecuted: new(true)},
		&helix.StepEndChunk{Base: rb(1)},
	)))
}

// A sub-agent's text, steps and server tools stay inside it; its
// client-executed and approval-gated calls are shown (the user answers
// them); its start and end are one data-subagent part.
func TestTranslateSubAgent(t *testing.T) {
	t.Parallel()
	golden(t, "subagent", translate(t, stored(
		&helix.StepStartChunk{Base: rb(1)},
		&helix.ToolStartChunk{Base: rb(1), ToolCallID: "call-9", ToolName: "subagent__checker", Arguments: json.RawMessage(`{"task":"check"}`)},
		&helix.SubAgentStartChunk{Base: rb(1), SubAgentType: "checker", SubSessionID: root + "-sub-call-9", CallID: "call-9"},
		&helix.StepStartChunk{Base: sb(1)},
		&helix.TextDeltaChunk{Base: sb(1), Delta: "sub-agent thinking aloud"},
		&helix.ToolStartChunk{Base: sb(1), ToolCallID: "c1", ToolName: "lookup", Arguments: json.RawMessage(`{}`)},
		&helix.ToolStartChunk{Base: sb(1), ToolCallID: "c2", ToolName: "ask_user", Arguments: json.RawMessage(`{"question":"ok?"}`), ProviderExecuted: new(false)},
		&helix.ToolStartChunk{Base: sb(1), ToolCallID: "c3", ToolName: "publish", Arguments: json.RawMessage(`{"doc":1}`)},
		&helix.ToolEndChunk{Base: sb(1), ToolCallID: "c1", ToolName: "lookup", Result: json.RawMessage(`1`), ProviderExecuted: new(true)},
		&helix.ToolApprovalRequestChunk{Base: sb(1), ToolCallID: "c3", ToolName: "publish", ApprovalID: "run-2::c3", Input: json.RawMessage(`{"doc":1}`)},
		&helix.ToolEndChunk{Base: sb(1), ToolCallID: "c2", ToolName: "ask_user", Result: json.RawMessage(`{"answer":"yes"}`), ProviderExecuted: new(false)},
		&helix.ToolEndChunk{Base: sb(1), ToolCallID: "c3", ToolName: "publish", Result: json.RawMessage(`{"published":true}`), ProviderExecuted: new(true)},
		&helix.StepEndChunk{Base: sb(1)},
		&helix.ErrorChunk{Base: sb(2), Error: "sub-agent detail", Code: "model_error"},
		&helix.SubAgentEndChunk{Base: rb(1), SubAgentType: "checker", SubSessionID: root + "-sub-call-9", CallID: "call-9", Result: json.RawMessage(`{"verdict":"ok"}`)},
		&helix.ToolEndChunk{Base: rb(1), ToolCallID: "call-9", ToolName: "subagent__checker", Result: json.RawMessage(`{"verdict":"ok"}`), ProviderExecuted: new(true)},
		&helix.StepEndChunk{Base: rb(1)},
	)))
}

// The rest: custom events are data parts, the structured output a
// data-output part, sources and files pass through, a resync is a
// transient data part, and a failed run's error hides its message.
func TestTranslateMisc(t *testing.T) {
	t.Parallel()
	golden(t, "misc", translate(t, stored(
		&helix.StepStartChunk{Base: rb(1)},
		&helix.TextDeltaChunk{Base: rb(1), Delta: "See "},
		&helix.SourceURLChunk{Base: rb(1), SourceID: "s1", URL: "https://example.com", Title: "Example"},
		&helix.SourceDocumentChunk{Base: rb(1), SourceID: "s2", MediaType: "application/pdf", Filename: "a.pdf"},
		&helix.FileChunk{Base: rb(1), URL: "data:text/plain;base64,aGk=", MediaType: "text/plain"},
		&helix.CustomEventChunk{Base: rb(1), EventName: "skill_loaded", Data: json.RawMessage(`{"name":"pdf"}`)},
		&helix.StreamResyncChunk{Base: rb(1), CheckpointID: "cp", FromSequence: 3, Reason: helix.ResyncCrashRecovery},
		&helix.OutputChunk{Base: rb(1), Output: json.RawMessage(`{"answer":42}`)},
		&helix.StepEndChunk{Base: rb(1), FinishReason: "stop"},
		&helix.ErrorChunk{Base: rb(2), Error: "pq: relation does not exist", Code: helix.CodeProviderRateLimited},
		&helix.ErrorChunk{Base: rb(2), Error: "no code"},
	)))
}

// A response that continues a stream for a client that has its first
// chunks (Reopen after priming) opens again the parts that were open, and
// keeps the tool states the earlier chunks set.
func TestTranslateReopen(t *testing.T) {
	t.Parallel()
	chunks := stored(
		&helix.StepStartChunk{Base: rb(1)},
		&helix.TextDeltaChunk{Base: rb(1), Delta: "Hello "},
		&helix.TextDeltaChunk{Base: rb(1), Delta: "wor"},
		&helix.TextDeltaChunk{Base: rb(1), Delta: "ld."},
		&helix.ToolArgStreamStartChunk{Base: rb(1), ToolCallID: "c1", ToolName: "ask_user"},
		&helix.ToolArgStreamDeltaChunk{Base: rb(1), ToolCallID: "c1", Delta: `{"question"`},
		&helix.ToolArgStreamDeltaChunk{Base: rb(1), ToolCallID: "c1", Delta: `:"colour?"}`},
		&helix.ToolStartChunk{Base: rb(1), ToolCallID: "c1", ToolName: "ask_user", Arguments: json.RawMessage(`{"question":"colour?"}`), ProviderExecuted: new(false)},
		&helix.ToolEndChunk{Base: rb(1), ToolCallID: "c1", ToolName: "ask_user", Result: json.RawMessage(`{"answer":"blue"}`), ProviderExecuted: new(false)},
	)
	for _, at := range []int{2, 5} {
		tr := aisdk.NewTranslator(root, nil)
		for _, c := range chunks[:at+1] {
			tr.Translate(c)
		}
		tr.Reopen()
		var out []aisdk.Chunk
		for _, c := range chunks[at+1:] {
			out = append(out, tr.Translate(c)...)
		}
		golden(t, "reopen_after_"+string(rune('0'+at+1)), append(out, tr.Close()...))
	}
}

// Translating the same chunks twice gives the same chunks (IDs derive from
// sequences), which is what makes a replay rebuild the same message.
func TestTranslateDeterministic(t *testing.T) {
	t.Parallel()
	chunks := stored(
		&helix.StepStartChunk{Base: rb(1)},
		&helix.TextDeltaChunk{Base: rb(1), Delta: "a"},
		&helix.ThinkingChunk{Base: rb(1), Content: "b"},
		&helix.TextDeltaChunk{Base: rb(1), Delta: "c"},
	)
	first, second := translate(t, chunks), translate(t, chunks)
	require.Equal(t, first, second)
}

// Without StructuredOutput the output chunk (a text agent's final text)
// is not repeated; ErrorText replaces the default error text.
func TestTranslateOptions(t *testing.T) {
	t.Parallel()
	tr := aisdk.NewTranslator(root, &aisdk.TranslatorOptions{ErrorText: func(c *helix.ErrorChunk) string { return "custom: " + c.Error }})
	require.Empty(t, tr.Translate(store.StoredChunk{Sequence: 1, Chunk: &helix.OutputChunk{Base: rb(1), Output: json.RawMessage(`"hi"`)}}))
	require.Equal(t, []aisdk.Chunk{{Type: "error", ErrorText: "custom: boom"}},
		tr.Translate(store.StoredChunk{Sequence: 2, Chunk: &helix.ErrorChunk{Base: rb(1), Error: "boom"}}))
}

func TestDefaultErrorText(t *testing.T) {
	t.Parallel()
	require.Equal(t, "The agent failed (provider_timeout).", aisdk.DefaultErrorText(&helix.ErrorChunk{Error: "secret", Code: "provider_timeout"}))
	require.Equal(t, "The agent failed (x).", aisdk.DefaultErrorText(&helix.ErrorChunk{Error: "secret", ErrorDetail: &helix.ErrorDetail{Code: "x"}}))
	require.Equal(t, "The agent failed.", aisdk.DefaultErrorText(&helix.ErrorChunk{Error: "secret"}))
}

// The text of an internal failure (code internal_error: the engine's own
// error, possibly SQL) never reaches the UI stream: a tool call's becomes
// a generic errorText, and a run's is replaced before ErrorText sees it. A
// tool's own error passes, as the model saw it.
func TestTranslateRedactsInternalFailures(t *testing.T) {
	t.Parallel()
	const secret = `ERROR: relation "helix.vault" does not exist`
	tr := aisdk.NewTranslator(root, &aisdk.TranslatorOptions{ErrorText: func(c *helix.ErrorChunk) string { return c.Error }})
	var out []aisdk.Chunk
	for _, c := range stored(
		&helix.ToolStartChunk{Base: rb(1), ToolCallID: "c1", ToolName: "lookup", Arguments: json.RawMessage(`{}`)},
		&helix.ToolStartChunk{Base: rb(1), ToolCallID: "c2", ToolName: "lookup", Arguments: json.RawMessage(`{}`)},
		&helix.ToolEndChunk{Base: rb(1), ToolCallID: "c1", ToolName: "lookup", Error: secret, ErrorCode: helix.CodeInternal, ProviderExecuted: new(true)},
		&helix.ToolEndChunk{Base: rb(1), ToolCallID: "c2", ToolName: "lookup", Error: "no such city", ErrorCode: "tool_error", ProviderExecuted: new(true)},
		&helix.ErrorChunk{Base: rb(2), Error: secret, Code: helix.CodeInternal},
	) {
		out = append(out, tr.Translate(c)...)
	}
	var errorTexts []string
	for _, c := range out {
		if c.ErrorText != "" {
			errorTexts = append(errorTexts, c.Type+": "+c.ErrorText)
		}
	}
	require.Equal(t, []string{
		"tool-output-error: " + redact.ToolFailure,
		"tool-output-error: no such city",
		"error: " + redact.RunFailure,
	}, errorTexts)
}
