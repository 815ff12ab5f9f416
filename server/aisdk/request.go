package aisdk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	helix "github.com/helix-agents/helix-dbos"
)

// ChatRequest is the body useChat's DefaultChatTransport posts: the chat's
// ID, its whole message history, the trigger and, for a continuation, the
// ID of the assistant message it continues. Fields a client adds through
// the transport's body option are ignored, except Agent.
type ChatRequest struct {
	// ID is the chat's ID, used as the helix session ID.
	ID string `json:"id"`
	// Messages is the chat as the client has it, oldest first.
	Messages []UIMessage `json:"messages"`
	// Trigger is "submit-message" (or empty); "regenerate-message" is
	// refused.
	Trigger string `json:"trigger,omitempty"`
	// MessageID is the message a submit continues or a regenerate
	// replaces.
	MessageID string `json:"messageId,omitempty"`
	// Agent names the agent of a new chat (an extra body field:
	// new DefaultChatTransport({body: {agent: "…"}})); empty means the
	// handler's first agent. An existing chat keeps its agent.
	Agent string `json:"agent,omitempty"`
}

// Triggers of a ChatRequest.
const (
	TriggerSubmitMessage     = "submit-message"
	TriggerRegenerateMessage = "regenerate-message"
)

// UIMessage is one message of a chat (the AI SDK's UIMessage).
type UIMessage struct {
	ID       string          `json:"id"`
	Role     string          `json:"role"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	Parts    []UIPart        `json:"parts"`
}

// UIPart is one part of a UIMessage. Only the fields this package reads are
// decoded; tool parts are "tool-<name>" (static) or "dynamic-tool" (with
// ToolName).
type UIPart struct {
	Type       string `json:"type"`
	Text       string `json:"text,omitempty"`
	ToolCallID string `json:"toolCallId,omitempty"`
	ToolName   string `json:"toolName,omitempty"`
	// State of a tool part: input-streaming, input-available,
	// approval-requested, approval-responded, output-available,
	// output-error or output-denied.
	State            string          `json:"state,omitempty"`
	Input            json.RawMessage `json:"input,omitempty"`
	Output           json.RawMessage `json:"output,omitempty"`
	ErrorText        string          `json:"errorText,omitempty"`
	ProviderExecuted *bool           `json:"providerExecuted,omitempty"`
	Preliminary      *bool           `json:"preliminary,omitempty"`
	Approval         *UIApproval     `json:"approval,omitempty"`
}

// UIApproval is a tool part's approval: the request's ID and, once the user
// answered (addToolApprovalResponse), the decision.
type UIApproval struct {
	ID       string `json:"id"`
	Approved *bool  `json:"approved,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// Tool part states the handler reads.
const (
	StateOutputAvailable   = "output-available"
	StateOutputError       = "output-error"
	StateApprovalResponded = "approval-responded"
)

// IsTool reports whether p is a tool part.
func (p UIPart) IsTool() bool { return p.Type == "dynamic-tool" || strings.HasPrefix(p.Type, "tool-") }

// Tool returns the tool's name of a tool part.
func (p UIPart) Tool() string {
	if p.Type == "dynamic-tool" {
		return p.ToolName
	}
	return strings.TrimPrefix(p.Type, "tool-")
}

// maxChatIDLength bounds chat IDs (they become session, stream and
// workflow IDs).
const maxChatIDLength = 128

// validChatID accepts the IDs clients generate (the AI SDK's 16-character
// IDs, UUIDs, ULIDs, slugs): 1 to 128 printable ASCII characters without
// spaces, slashes, percent signs or quotes.
func validChatID(id string) bool {
	if id == "" || len(id) > maxChatIDLength || id == "." || id == ".." {
		return false
	}
	for i := range len(id) {
		c := id[i]
		if c <= ' ' || c > '~' || strings.IndexByte(`/\%"'?#`, c) >= 0 {
			return false
		}
	}
	return true
}

// requestError is a malformed request: what the client must fix.
type requestError struct{ msg string }

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{msg: fmt.Sprintf(format, args...)}
}

// errInvalidJSON reports a body that is not a JSON object.
var errInvalidJSON = errors.New("aisdk: the body is not valid JSON")

// ParseChatRequest decodes and validates a useChat request body.
func ParseChatRequest(body []byte) (*ChatRequest, error) {
	var req ChatRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		if typeErr, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			return nil, badRequest("field %q has the wrong type", typeErr.Field)
		}
		return nil, errInvalidJSON
	}
	if dec.More() {
		return nil, errInvalidJSON
	}
	if !validChatID(req.ID) {
		return nil, badRequest("id must be 1 to %d printable ASCII characters without spaces, slashes or quotes", maxChatIDLength)
	}
	switch req.Trigger {
	case "", TriggerSubmitMessage:
	case TriggerRegenerateMessage:
		return nil, badRequest("trigger %q is not supported: the server keeps the conversation; send a new message instead", req.Trigger)
	default:
		return nil, badRequest("unknown trigger %q (want %q)", req.Trigger, TriggerSubmitMessage)
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages is empty")
	}
	switch last := req.Messages[len(req.Messages)-1]; last.Role {
	case string(helix.RoleUser), string(helix.RoleAssistant):
	default:
		return nil, badRequest("the last message must be a user message (a new turn) or the assistant message with tool results (a continuation), got role %q", last.Role)
	}
	return &req, nil
}

// last returns the request's last message.
func (r *ChatRequest) last() UIMessage { return r.Messages[len(r.Messages)-1] }

// userText returns the text of a user message: its text parts, joined by
// blank lines. File parts are refused (the agent would not see them);
// other parts (data, sources) are ignored.
func userText(m UIMessage) (string, error) {
	var texts []string
	for _, p := range m.Parts {
		switch p.Type {
		case "text":
			if strings.TrimSpace(p.Text) != "" {
				texts = append(texts, p.Text)
			}
		case "file":
			return "", badRequest("file parts are not supported: send text")
		}
	}
	if len(texts) == 0 {
		return "", badRequest("the last user message has no text")
	}
	s := strings.Join(texts, "\n\n")
	if !utf8.ValidString(s) {
		return "", badRequest("the message text is not valid UTF-8")
	}
	return s, nil
}

// toolAnswer is what an assistant message says about one tool call: a
// client tool's output or error, or an approval decision.
type toolAnswer struct {
	toolCallID string
	toolName   string
	// Client tool outcome.
	hasOutput bool
	output    json.RawMessage
	errorText string
	// Approval decision.
	approved *bool
	reason   string
}

// toolAnswers returns the answers an assistant message carries, by call ID:
// client-executed tool parts with an output or an error, and tool parts
// whose approval was answered. Parts the server produced
// (providerExecuted) and preliminary outputs are not answers.
func toolAnswers(m UIMessage) map[string]toolAnswer {
	out := map[string]toolAnswer{}
	for _, p := range m.Parts {
		if !p.IsTool() || p.ToolCallID == "" {
			continue
		}
		a := toolAnswer{toolCallID: p.ToolCallID, toolName: p.Tool()}
		switch {
		case p.State == StateApprovalResponded && p.Approval != nil && p.Approval.Approved != nil:
			a.approved, a.reason = p.Approval.Approved, p.Approval.Reason
		case p.State == StateOutputAvailable && !isTrue(p.ProviderExecuted) && !isTrue(p.Preliminary):
			a.hasOutput, a.output = true, orNull(p.Output)
		case p.State == StateOutputError && !isTrue(p.ProviderExecuted):
			a.errorText = nonEmpty(p.ErrorText, "the client tool failed")
		default:
			continue
		}
		out[p.ToolCallID] = a
	}
	return out
}

// submission turns an answer into the submission the pending call's kind
// takes, or reports that the answer does not fit the call.
func (a toolAnswer) submission(kind helix.SubmissionKind) (helix.ToolSubmission, bool) {
	switch kind {
	case helix.SubmissionApprovalResponse:
		if a.approved == nil {
			return helix.ToolSubmission{}, false
		}
		if *a.approved {
			return helix.Approve(a.toolCallID, a.reason), true
		}
		return helix.Deny(a.toolCallID, a.reason), true
	case helix.SubmissionClientToolResult:
		if a.hasOutput {
			return helix.ToolSubmission{Kind: kind, ToolCallID: a.toolCallID, Result: a.output}, true
		}
		if a.errorText != "" {
			return helix.ClientToolError(a.toolCallID, a.errorText), true
		}
	}
	return helix.ToolSubmission{}, false
}

// streamHint is the position the server stamped on the assistant message's
// metadata when its last response ended ({"helix": {...}}).
type streamHint struct {
	RunID    string `json:"runId"`
	Sequence *int64 `json:"sequence"`
}

// hint returns the stream position of an assistant message's metadata.
func hint(m UIMessage) (streamHint, bool) {
	var md struct {
		Helix *streamHint `json:"helix"`
	}
	if len(m.Metadata) == 0 || json.Unmarshal(m.Metadata, &md) != nil || md.Helix == nil || md.Helix.RunID == "" {
		return streamHint{}, false
	}
	return *md.Helix, true
}

// SubmitRequest is the body of POST /chat/{sessionId}/submit-tool-result:
// a client tool's output (Output, which may be null) or failure (Error),
// or an approval decision (Approved, with an optional Reason). Exactly one
// of Output, Error and Approved.
type SubmitRequest struct {
	ToolCallID string          `json:"toolCallId"`
	Output     json.RawMessage `json:"output,omitempty"`
	Error      string          `json:"error,omitempty"`
	Approved   *bool           `json:"approved,omitempty"`
	Reason     string          `json:"reason,omitempty"`
}

// parseSubmitRequest decodes and validates a submit-tool-result body into
// the submission it asks for.
func parseSubmitRequest(body []byte) (helix.ToolSubmission, error) {
	var req SubmitRequest
	// A present "output": null decodes into "null"; an absent one stays nil.
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		if typeErr, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			return helix.ToolSubmission{}, badRequest("field %q has the wrong type", typeErr.Field)
		}
		return helix.ToolSubmission{}, errInvalidJSON
	}
	if dec.More() {
		return helix.ToolSubmission{}, errInvalidJSON
	}
	if req.ToolCallID == "" {
		return helix.ToolSubmission{}, badRequest("toolCallId is required")
	}
	n := 0
	for _, set := range []bool{req.Output != nil, req.Error != "", req.Approved != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return helix.ToolSubmission{}, badRequest("give exactly one of output (a client tool's result), error (its failure) and approved (an approval decision)")
	}
	switch {
	case req.Approved != nil && *req.Approved:
		return helix.Approve(req.ToolCallID, req.Reason), nil
	case req.Approved != nil:
		return helix.Deny(req.ToolCallID, req.Reason), nil
	case req.Reason != "":
		return helix.ToolSubmission{}, badRequest("reason goes with approved")
	case req.Error != "":
		return helix.ClientToolError(req.ToolCallID, req.Error), nil
	}
	return helix.ToolSubmission{Kind: helix.SubmissionClientToolResult, ToolCallID: req.ToolCallID, Result: req.Output}, nil
}

func isTrue(b *bool) bool { return b != nil && *b }
