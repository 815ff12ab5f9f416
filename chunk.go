package helix

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// ChunkType is the "type" discriminator of a stream chunk.
type ChunkType string

// Chunk types, exactly as on the wire.
const (
	ChunkTextDelta            ChunkType = "text_delta"
	ChunkThinking             ChunkType = "thinking"
	ChunkToolArgStreamStart   ChunkType = "tool_arg_stream_start"
	ChunkToolArgStreamDelta   ChunkType = "tool_arg_stream_delta"
	ChunkToolArgStreamEnd     ChunkType = "tool_arg_stream_end"
	ChunkToolStart            ChunkType = "tool_start"
	ChunkToolEnd              ChunkType = "tool_end"
	ChunkToolApprovalRequest  ChunkType = "tool_approval_request"
	ChunkToolApprovalResponse ChunkType = "tool_approval_response"
	ChunkToolInputError       ChunkType = "tool_input_error"
	ChunkToolOutputError      ChunkType = "tool_output_error"
	ChunkSubAgentStart        ChunkType = "subagent_start"
	ChunkSubAgentEnd          ChunkType = "subagent_end"
	ChunkCustom               ChunkType = "custom"
	ChunkStatePatch           ChunkType = "state_patch"
	ChunkError                ChunkType = "error"
	ChunkOutput               ChunkType = "output"
	ChunkSourceURL            ChunkType = "source_url"
	ChunkSourceDocument       ChunkType = "source_document"
	ChunkStepStart            ChunkType = "step_start"
	ChunkStepEnd              ChunkType = "step_end"
	ChunkFile                 ChunkType = "file"
	ChunkRunInterrupted       ChunkType = "run_interrupted"
	ChunkRunResumed           ChunkType = "run_resumed"
	ChunkRunPaused            ChunkType = "run_paused"
	ChunkExecutorSuperseded   ChunkType = "executor_superseded"
	ChunkRunQueued            ChunkType = "run_queued"
	ChunkCheckpointCreated    ChunkType = "checkpoint_created"
	ChunkStepCommitted        ChunkType = "step_committed"
	ChunkStepDiscarded        ChunkType = "step_discarded"
	ChunkStreamResync         ChunkType = "stream_resync"
	ChunkSuspensionMarker     ChunkType = "suspension_marker"
	// ChunkStreamEnd is the control message closing a stream. It has no base
	// fields.
	ChunkStreamEnd ChunkType = "stream_end"
)

// Chunk is one event of a session's stream. The concrete types in this
// package are used by pointer (*TextDelta, *ToolEnd, ...). Marshal a chunk
// with encoding/json (the "type" field is added automatically) and decode one
// with [UnmarshalChunk].
type Chunk interface {
	// ChunkType returns the chunk's wire discriminator.
	ChunkType() ChunkType
	// ChunkBase returns the base fields for mutation, or nil for stream_end.
	ChunkBase() *Base
}

// Base holds the fields every data chunk carries. AgentID is the session ID
// of the agent that emitted the chunk (a sub-agent's chunks carry the
// sub-agent's session ID), Timestamp is milliseconds since the Unix epoch and
// Step the step number within the current turn, used to clean up chunks of a
// step that is re-executed.
type Base struct {
	AgentID   string `json:"agentId"`
	AgentType string `json:"agentType"`
	Timestamp int64  `json:"timestamp"`
	Step      int    `json:"step"`
}

// ChunkBase returns b itself.
func (b *Base) ChunkBase() *Base { return b }

var baseKeys = []string{"agentId", "agentType", "timestamp", "step"}

// TextDeltaChunk is token-by-token text from the model.
type TextDeltaChunk struct {
	Base
	Delta string `json:"delta"`
}

// ThinkingChunk carries reasoning content: IsComplete is false while
// streaming and true for a complete block.
type ThinkingChunk struct {
	Base
	Content    string `json:"content"`
	IsComplete bool   `json:"isComplete"`
}

// ToolArgStreamStartChunk opens the streamed arguments of a tool call.
type ToolArgStreamStartChunk struct {
	Base
	ToolCallID string `json:"toolCallId"`
	ToolName   string `json:"toolName"`
}

// ToolArgStreamDeltaChunk is a piece of a tool call's JSON arguments.
type ToolArgStreamDeltaChunk struct {
	Base
	ToolCallID string `json:"toolCallId"`
	Delta      string `json:"delta"`
}

// ToolArgStreamEndChunk closes the streamed arguments of a tool call.
type ToolArgStreamEndChunk struct {
	Base
	ToolCallID string `json:"toolCallId"`
}

// ToolStartChunk is emitted when a tool invocation begins.
type ToolStartChunk struct {
	Base
	ToolCallID string          `json:"toolCallId"`
	ToolName   string          `json:"toolName"`
	Arguments  json.RawMessage `json:"arguments"`
	// ProviderExecuted is false for a client-executed tool (the client
	// runs it and submits its result) and absent otherwise. An extension of
	// the protocol's tool_start, mirroring tool_end's field.
	ProviderExecuted *bool `json:"providerExecuted,omitempty"`
}

// ToolEndChunk is emitted when a tool invocation completes. Error and ErrorCode
// are set when it failed; ProviderExecuted is true for tools the framework
// ran and false for client-executed tools (absent means client-executed).
type ToolEndChunk struct {
	Base
	ToolCallID       string          `json:"toolCallId"`
	ToolName         string          `json:"toolName"`
	Result           json.RawMessage `json:"result"`
	Error            string          `json:"error,omitempty"`
	ErrorCode        string          `json:"errorCode,omitempty"`
	ProviderExecuted *bool           `json:"providerExecuted,omitempty"`
}

// ToolApprovalRequestChunk asks a human (or an automatic evaluator) to approve a
// tool call. ApprovalID is "{runId}::{toolCallId}".
type ToolApprovalRequestChunk struct {
	Base
	ToolCallID  string          `json:"toolCallId"`
	ToolName    string          `json:"toolName"`
	ApprovalID  string          `json:"approvalId"`
	Input       json.RawMessage `json:"input"`
	IsAutomatic *bool           `json:"isAutomatic,omitempty"`
}

// ToolApprovalResponseChunk mirrors a [ToolApprovalRequestChunk] with the decision.
type ToolApprovalResponseChunk struct {
	Base
	ToolCallID  string `json:"toolCallId"`
	ToolName    string `json:"toolName"`
	ApprovalID  string `json:"approvalId"`
	Approved    bool   `json:"approved"`
	Reason      string `json:"reason,omitempty"`
	IsAutomatic *bool  `json:"isAutomatic,omitempty"`
}

// ToolInputErrorChunk reports tool arguments that failed validation.
type ToolInputErrorChunk struct {
	Base
	ToolCallID   string          `json:"toolCallId"`
	ToolName     string          `json:"toolName"`
	Error        string          `json:"error"`
	PartialInput json.RawMessage `json:"partialInput,omitempty"`
}

// ToolOutputErrorChunk reports a tool output that failed validation.
type ToolOutputErrorChunk struct {
	Base
	ToolCallID string `json:"toolCallId"`
	ToolName   string `json:"toolName"`
	Error      string `json:"error"`
}

// SubAgentStartChunk is emitted in the parent's stream when a sub-agent starts;
// AgentID is the parent's session ID.
type SubAgentStartChunk struct {
	Base
	SubAgentType string `json:"subAgentType"`
	SubSessionID string `json:"subSessionId"`
	CallID       string `json:"callId"`
}

// SubAgentEndChunk is emitted when a sub-agent completes; Result is its output.
type SubAgentEndChunk struct {
	Base
	SubAgentType string          `json:"subAgentType"`
	SubSessionID string          `json:"subSessionId"`
	CallID       string          `json:"callId"`
	Result       json.RawMessage `json:"result"`
}

// CustomEventChunk is an application event emitted by a tool through ToolContext.Emit.
type CustomEventChunk struct {
	Base
	EventName string          `json:"eventName"`
	Data      json.RawMessage `json:"data"`
}

// StatePatchChunk carries RFC 6902 patches applied to the custom state.
type StatePatchChunk struct {
	Base
	Patches []PatchOp `json:"patches"`
}

// ErrorDetail is the structured form of an error chunk's error.
type ErrorDetail struct {
	Message   string `json:"message"`
	Code      string `json:"code,omitempty"`
	Category  string `json:"category,omitempty"`
	Cause     string `json:"cause,omitempty"`
	Retryable *bool  `json:"retryable,omitempty"`
}

// ErrorChunk reports an error. Code and Recoverable come from a classified
// error (for example provider_rate_limited, recoverable).
type ErrorChunk struct {
	Base
	Error       string       `json:"error"`
	Code        string       `json:"code,omitempty"`
	ErrorDetail *ErrorDetail `json:"errorDetail,omitempty"`
	Recoverable bool         `json:"recoverable"`
}

// OutputChunk carries the final structured output of an agent with an output
// schema.
type OutputChunk struct {
	Base
	Output json.RawMessage `json:"output"`
}

// SourceURLChunk is a URL citation.
type SourceURLChunk struct {
	Base
	SourceID string `json:"sourceId"`
	URL      string `json:"url"`
	Title    string `json:"title,omitempty"`
}

// SourceDocumentChunk is a document citation.
type SourceDocumentChunk struct {
	Base
	SourceID  string `json:"sourceId"`
	MediaType string `json:"mediaType"`
	Title     string `json:"title"`
	Filename  string `json:"filename,omitempty"`
}

// StepStartChunk marks the beginning of an agent step.
type StepStartChunk struct {
	Base
	StepID string `json:"stepId,omitempty"`
}

// StepEndChunk marks the end of an agent step with the model's usage and finish
// reason (stop, length, tool-calls, content-filter, error or other).
type StepEndChunk struct {
	Base
	StepID       string `json:"stepId,omitempty"`
	Usage        *Usage `json:"usage,omitempty"`
	FinishReason string `json:"finishReason,omitempty"`
}

// FileChunk is a generated file or attachment (a data URL or a hosted URL).
type FileChunk struct {
	Base
	URL       string `json:"url"`
	MediaType string `json:"mediaType"`
	Filename  string `json:"filename,omitempty"`
}

// RunInterruptedChunk is emitted when a run stops on an interrupt; CheckpointID is
// nil when no checkpoint could be written.
type RunInterruptedChunk struct {
	Base
	RunID        string  `json:"runId"`
	CheckpointID *string `json:"checkpointId"`
	Reason       string  `json:"reason,omitempty"`
}

// RunResumedChunk is emitted when an interrupted or suspended run resumes. Mode is
// continue, with_message, with_confirmation or from_checkpoint.
type RunResumedChunk struct {
	Base
	RunID            string  `json:"runId"`
	FromCheckpointID *string `json:"fromCheckpointId"`
	FromStepCount    int     `json:"fromStepCount"`
	Mode             string  `json:"mode"`
}

// RunPausedChunk is emitted when a run pauses for confirmation.
type RunPausedChunk struct {
	Base
	RunID             string `json:"runId"`
	Reason            string `json:"reason"`
	PendingToolName   string `json:"pendingToolName,omitempty"`
	PendingToolCallID string `json:"pendingToolCallId,omitempty"`
}

// RunQueuedChunk is emitted when a run is admitted through its engine's
// queue (engine.Config.Queue): it waits for a slot before its first step,
// which its step_start marks. A helix-dbos addition.
type RunQueuedChunk struct {
	Base
	RunID string `json:"runId"`
	// Queue names the queue; PartitionKey the run's partition (its tenant).
	Queue        string `json:"queue"`
	PartitionKey string `json:"partitionKey,omitempty"`
}

// ExecutorSupersededChunk is emitted when another executor took over the session.
type ExecutorSupersededChunk struct {
	Base
	Reason string `json:"reason,omitempty"`
}

// CheckpointCreatedChunk is emitted after a checkpoint is written.
type CheckpointCreatedChunk struct {
	Base
	RunID        string `json:"runId"`
	CheckpointID string `json:"checkpointId"`
	StepCount    int    `json:"stepCount"`
}

// StepCommittedChunk is emitted after a step's changes were committed.
type StepCommittedChunk struct {
	Base
	RunID        string `json:"runId"`
	StepID       string `json:"stepId"`
	CheckpointID string `json:"checkpointId"`
}

// StepDiscardedChunk is emitted when a step's staged changes were discarded.
type StepDiscardedChunk struct {
	Base
	RunID  string `json:"runId"`
	StepID string `json:"stepId"`
	Reason string `json:"reason"`
}

// Stream resync reasons.
const (
	ResyncCrashRecovery = "crash_recovery"
	ResyncRollback      = "rollback"
	ResyncBranch        = "branch"
	ResyncRetry         = "retry"
)

// StreamResyncChunk tells readers that chunks were cleaned up (crash recovery,
// rollback, branch or retry) and they should reload state from the server.
type StreamResyncChunk struct {
	Base
	CheckpointID string `json:"checkpointId"`
	StepCount    int    `json:"stepCount"`
	MessageCount int    `json:"messageCount"`
	FromSequence int64  `json:"fromSequence"`
	Reason       string `json:"reason"`
}

// SuspensionMarkerChunk is the specification's internal coordination chunk for
// runtimes whose workflow stays alive across suspensions. Kind is a
// suspended AgentStatus; Payload has the shape of [Suspension].
type SuspensionMarkerChunk struct {
	Base
	Kind    AgentStatus     `json:"kind"`
	Payload json.RawMessage `json:"payload"`
}

// StreamEnd is the control message that closes a stream. FinalOutput is the
// root agent's output, when it has one.
type StreamEnd struct {
	StreamID    string          `json:"streamId"`
	Timestamp   int64           `json:"timestamp"`
	FinalOutput json.RawMessage `json:"finalOutput,omitempty"`
}

// ChunkBase returns nil: stream_end carries no base fields.
func (*StreamEnd) ChunkBase() *Base { return nil }

// chunkKind describes one variant for decoding: how to allocate it and which
// keys must be present.
type chunkKind struct {
	alloc    func() Chunk
	required []string
}

var chunkKinds = map[ChunkType]chunkKind{
	ChunkTextDelta:            {func() Chunk { return new(TextDeltaChunk) }, []string{"delta"}},
	ChunkThinking:             {func() Chunk { return new(ThinkingChunk) }, []string{"content", "isComplete"}},
	ChunkToolArgStreamStart:   {func() Chunk { return new(ToolArgStreamStartChunk) }, []string{"toolCallId", "toolName"}},
	ChunkToolArgStreamDelta:   {func() Chunk { return new(ToolArgStreamDeltaChunk) }, []string{"toolCallId", "delta"}},
	ChunkToolArgStreamEnd:     {func() Chunk { return new(ToolArgStreamEndChunk) }, []string{"toolCallId"}},
	ChunkToolStart:            {func() Chunk { return new(ToolStartChunk) }, []string{"toolCallId", "toolName", "arguments"}},
	ChunkToolEnd:              {func() Chunk { return new(ToolEndChunk) }, []string{"toolCallId", "toolName", "result"}},
	ChunkToolApprovalRequest:  {func() Chunk { return new(ToolApprovalRequestChunk) }, []string{"toolCallId", "toolName", "approvalId", "input"}},
	ChunkToolApprovalResponse: {func() Chunk { return new(ToolApprovalResponseChunk) }, []string{"toolCallId", "toolName", "approvalId", "approved"}},
	ChunkToolInputError:       {func() Chunk { return new(ToolInputErrorChunk) }, []string{"toolCallId", "toolName", "error"}},
	ChunkToolOutputError:      {func() Chunk { return new(ToolOutputErrorChunk) }, []string{"toolCallId", "toolName", "error"}},
	ChunkSubAgentStart:        {func() Chunk { return new(SubAgentStartChunk) }, []string{"subAgentType", "subSessionId", "callId"}},
	ChunkSubAgentEnd:          {func() Chunk { return new(SubAgentEndChunk) }, []string{"subAgentType", "subSessionId", "callId", "result"}},
	ChunkCustom:               {func() Chunk { return new(CustomEventChunk) }, []string{"eventName", "data"}},
	ChunkStatePatch:           {func() Chunk { return new(StatePatchChunk) }, []string{"patches"}},
	ChunkError:                {func() Chunk { return new(ErrorChunk) }, []string{"error", "recoverable"}},
	ChunkOutput:               {func() Chunk { return new(OutputChunk) }, []string{"output"}},
	ChunkSourceURL:            {func() Chunk { return new(SourceURLChunk) }, []string{"sourceId", "url"}},
	ChunkSourceDocument:       {func() Chunk { return new(SourceDocumentChunk) }, []string{"sourceId", "mediaType", "title"}},
	ChunkStepStart:            {func() Chunk { return new(StepStartChunk) }, nil},
	ChunkStepEnd:              {func() Chunk { return new(StepEndChunk) }, nil},
	ChunkFile:                 {func() Chunk { return new(FileChunk) }, []string{"url", "mediaType"}},
	ChunkRunInterrupted:       {func() Chunk { return new(RunInterruptedChunk) }, []string{"runId", "checkpointId"}},
	ChunkRunResumed:           {func() Chunk { return new(RunResumedChunk) }, []string{"runId", "fromCheckpointId", "fromStepCount", "mode"}},
	ChunkRunPaused:            {func() Chunk { return new(RunPausedChunk) }, []string{"runId", "reason"}},
	ChunkExecutorSuperseded:   {func() Chunk { return new(ExecutorSupersededChunk) }, nil},
	ChunkRunQueued:            {func() Chunk { return new(RunQueuedChunk) }, []string{"runId", "queue"}},
	ChunkCheckpointCreated:    {func() Chunk { return new(CheckpointCreatedChunk) }, []string{"runId", "checkpointId", "stepCount"}},
	ChunkStepCommitted:        {func() Chunk { return new(StepCommittedChunk) }, []string{"runId", "stepId", "checkpointId"}},
	ChunkStepDiscarded:        {func() Chunk { return new(StepDiscardedChunk) }, []string{"runId", "stepId", "reason"}},
	ChunkStreamResync:         {func() Chunk { return new(StreamResyncChunk) }, []string{"checkpointId", "stepCount", "messageCount", "fromSequence", "reason"}},
	ChunkSuspensionMarker:     {func() Chunk { return new(SuspensionMarkerChunk) }, []string{"kind", "payload"}},
	ChunkStreamEnd:            {func() Chunk { return new(StreamEnd) }, []string{"streamId", "timestamp"}},
}

// ChunkTypes returns every chunk type, sorted.
func ChunkTypes() []ChunkType {
	out := make([]ChunkType, 0, len(chunkKinds))
	for t := range chunkKinds {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// Valid reports whether t is a known chunk type.
func (t ChunkType) Valid() bool {
	_, ok := chunkKinds[t]
	return ok
}

// IsDelta reports whether chunks of type t are incremental pieces that a
// stream writer may coalesce into batched inserts (text, streamed thinking,
// streamed tool arguments).
func (t ChunkType) IsDelta() bool {
	return t == ChunkTextDelta || t == ChunkThinking || t == ChunkToolArgStreamDelta
}

// UnmarshalChunk decodes one chunk of any type. It returns an error, never a
// zero value, for malformed JSON, an unknown or missing "type", a missing
// required field, a field of the wrong JSON type or an unknown field.
func UnmarshalChunk(data []byte) (Chunk, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, fmt.Errorf("helix: decode chunk: %w", err)
	}
	if fields == nil {
		return nil, fmt.Errorf("helix: decode chunk: want a JSON object, got null")
	}
	rawType, ok := fields["type"]
	if !ok {
		return nil, fmt.Errorf(`helix: decode chunk: missing "type"`)
	}
	var typ ChunkType
	if err := json.Unmarshal(rawType, &typ); err != nil {
		return nil, fmt.Errorf(`helix: decode chunk: "type" must be a string: %w`, err)
	}
	kind, ok := chunkKinds[typ]
	if !ok {
		return nil, fmt.Errorf("helix: decode chunk: unknown chunk type %q", typ)
	}
	required := kind.required
	if typ != ChunkStreamEnd {
		required = append(slices.Clone(baseKeys), required...)
	}
	var missing []string
	for _, k := range required {
		if _, ok := fields[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("helix: decode %s chunk: missing required field(s) %s", typ, strings.Join(missing, ", "))
	}
	delete(fields, "type")
	body, err := json.Marshal(fields)
	if err != nil {
		return nil, fmt.Errorf("helix: decode %s chunk: %w", typ, err)
	}
	c := kind.alloc()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		return nil, fmt.Errorf("helix: decode %s chunk: %w", typ, err)
	}
	return c, nil
}

// marshalTyped marshals v (a chunk struct without its MarshalJSON method) and
// prepends the "type" discriminator.
func marshalTyped(t ChunkType, v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(body)+len(t)+12)
	out = append(out, `{"type":"`...)
	out = append(out, t...)
	out = append(out, '"')
	if len(body) > 2 {
		out = append(out, ',')
	}
	return append(out, body[1:]...), nil
}
