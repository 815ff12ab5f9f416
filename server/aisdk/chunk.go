package aisdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Header names and values of the UI message stream protocol.
const (
	// HeaderUIMessageStream marks a response as a UI message stream; the
	// AI SDK's own server helpers send it with the value
	// UIMessageStreamVersion.
	HeaderUIMessageStream  = "X-Vercel-Ai-Ui-Message-Stream" // canonical form of x-vercel-ai-ui-message-stream
	UIMessageStreamVersion = "v1"

	// HeaderResumeFromSequence is the last stream sequence a reconnecting
	// client has seen (helix's resume header); Last-Event-ID is read when
	// it is absent.
	HeaderResumeFromSequence = "X-Resume-From-Sequence"
	// HeaderExistingMessageID is the ID of the assistant message a
	// reconnecting client already shows: the stream's start chunk reuses
	// it, so the client continues that message instead of adding one.
	HeaderExistingMessageID = "X-Existing-Message-Id"
)

// Chunk types of the UI message stream this package writes (the AI SDK's
// UIMessageChunk "type" values).
const (
	TypeStart               = "start"
	TypeFinish              = "finish"
	TypeStartStep           = "start-step"
	TypeFinishStep          = "finish-step"
	TypeTextStart           = "text-start"
	TypeTextDelta           = "text-delta"
	TypeTextEnd             = "text-end"
	TypeReasoningStart      = "reasoning-start"
	TypeReasoningDelta      = "reasoning-delta"
	TypeReasoningEnd        = "reasoning-end"
	TypeToolInputStart      = "tool-input-start"
	TypeToolInputDelta      = "tool-input-delta"
	TypeToolInputAvailable  = "tool-input-available"
	TypeToolInputError      = "tool-input-error"
	TypeToolApprovalRequest = "tool-approval-request"
	TypeToolOutputAvailable = "tool-output-available"
	TypeToolOutputError     = "tool-output-error"
	TypeToolOutputDenied    = "tool-output-denied"
	TypeSourceURL           = "source-url"
	TypeSourceDocument      = "source-document"
	TypeFile                = "file"
	TypeError               = "error"
)

// Data part types the translator writes (data parts are "data-<name>").
const (
	TypeDataSubAgent = "data-subagent"
	TypeDataOutput   = "data-output"
	TypeDataResync   = "data-helix-resync"
)

// Finish reasons of the finish chunk. They are the values AI SDK 6 and 7
// both accept (7 adds "interrupted", which 6 rejects).
const (
	FinishStop          = "stop"
	FinishLength        = "length"
	FinishContentFilter = "content-filter"
	FinishToolCalls     = "tool-calls"
	FinishError         = "error"
	FinishOther         = "other"
)

// Chunk is one UI message stream chunk, encoded as the JSON object the AI
// SDK's uiMessageChunkSchema accepts. Only the fields of its Type are set;
// the others are omitted from the JSON.
type Chunk struct {
	Type string `json:"type"`
	// ID identifies a text, reasoning or data part.
	ID        string `json:"id,omitempty"`
	MessageID string `json:"messageId,omitempty"`
	// Delta is the text of a text-delta or reasoning-delta.
	Delta            string          `json:"delta,omitempty"`
	ToolCallID       string          `json:"toolCallId,omitempty"`
	ToolName         string          `json:"toolName,omitempty"`
	InputTextDelta   string          `json:"inputTextDelta,omitempty"`
	Input            json.RawMessage `json:"input,omitempty"`
	Output           json.RawMessage `json:"output,omitempty"`
	ErrorText        string          `json:"errorText,omitempty"`
	ProviderExecuted *bool           `json:"providerExecuted,omitempty"`
	ApprovalID       string          `json:"approvalId,omitempty"`
	IsAutomatic      *bool           `json:"isAutomatic,omitempty"`
	SourceID         string          `json:"sourceId,omitempty"`
	URL              string          `json:"url,omitempty"`
	Title            string          `json:"title,omitempty"`
	MediaType        string          `json:"mediaType,omitempty"`
	Filename         string          `json:"filename,omitempty"`
	Data             json.RawMessage `json:"data,omitempty"`
	Transient        bool            `json:"transient,omitempty"`
	FinishReason     string          `json:"finishReason,omitempty"`
	MessageMetadata  any             `json:"messageMetadata,omitempty"`
}

// sseWriter writes the UI message stream as server-sent events and flushes
// after every event, each within a write deadline.
type sseWriter struct {
	w       io.Writer
	rc      *http.ResponseController
	timeout time.Duration // of one event's write and flush; 0: none
}

// event writes one chunk as "data: {json}\n\n", preceded by "id: <seq>"
// when seq > 0 (the stream sequence a reconnecting client may send back in
// Last-Event-ID).
func (s *sseWriter) event(c Chunk, seq int64) error {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("aisdk: encode %s chunk: %w", c.Type, err)
	}
	buf := make([]byte, 0, len(b)+32)
	if seq > 0 {
		buf = append(buf, "id: "...)
		buf = strconv.AppendInt(buf, seq, 10)
		buf = append(buf, '\n')
	}
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	return s.write(buf)
}

// done writes the terminator the AI SDK's servers end a stream with.
func (s *sseWriter) done() error { return s.write([]byte("data: [DONE]\n\n")) }

// keepAlive writes an SSE comment, which every event-stream parser ignores,
// so that idle proxies keep the connection.
func (s *sseWriter) keepAlive() error { return s.write([]byte(": keep-alive\n\n")) }

// comment writes an SSE comment line.
func (s *sseWriter) comment(text string) error { return s.write([]byte(": " + text + "\n\n")) }

// deadline arms the write deadline of the next event. The deadline is the
// connection's: net/http clears it when the response ends. A writer that
// cannot set one (ErrNotSupported) writes without.
func (s *sseWriter) deadline() error {
	if s.rc == nil || s.timeout <= 0 {
		return nil
	}
	if err := s.rc.SetWriteDeadline(time.Now().Add(s.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// write writes and flushes b; a write that does not complete before the
// deadline (the client stopped reading) fails, which ends the response.
func (s *sseWriter) write(b []byte) error {
	if err := s.deadline(); err != nil {
		return err
	}
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	if s.rc == nil {
		return nil
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}
