package helix

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"time"
)

// Names the framework reserves.
const (
	// FinishToolName is the tool an agent with an output schema calls to
	// deliver its structured output.
	FinishToolName = "__finish__"
	// LoadSkillToolName and ReadSkillFileToolName are the skill tools.
	LoadSkillToolName     = "load_skill"
	ReadSkillFileToolName = "read_skill_file"
	// SubAgentToolPrefix starts the name of every sub-agent tool
	// (subagent__<agentName>).
	SubAgentToolPrefix = "subagent__"
	// CompanionToolPrefix starts the name of every companion tool
	// (companion__spawnAgent, ...).
	CompanionToolPrefix = "companion__"
)

// MaxToolNameLength is the longest tool name providers accept.
const MaxToolNameLength = 64

var toolNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// ReservedToolNames returns the names user tools may not take.
func ReservedToolNames() []string {
	return []string{FinishToolName, LoadSkillToolName, ReadSkillFileToolName}
}

// IsFinishTool reports whether name is the __finish__ tool.
func IsFinishTool(name string) bool { return name == FinishToolName }

// IsSubAgentTool reports whether name is a sub-agent tool.
func IsSubAgentTool(name string) bool { return strings.HasPrefix(name, SubAgentToolPrefix) }

// IsCompanionTool reports whether name is a companion tool.
func IsCompanionTool(name string) bool { return strings.HasPrefix(name, CompanionToolPrefix) }

// ValidateToolName checks a user tool's name: 1 to 64 characters from
// [a-zA-Z0-9_-] (what model providers accept), not reserved, and not using a
// framework prefix.
func ValidateToolName(name string) error {
	if err := validateName(name, MaxToolNameLength); err != nil {
		return err
	}
	switch {
	case slices.Contains(ReservedToolNames(), name):
		return fmt.Errorf("%q is reserved by the framework", name)
	case IsSubAgentTool(name):
		return fmt.Errorf("the %q prefix is reserved for sub-agent tools (use helix.SubAgentTool)", SubAgentToolPrefix)
	case IsCompanionTool(name):
		return fmt.Errorf("the %q prefix is reserved for companion tools (configure Agent.PersistentAgents)", CompanionToolPrefix)
	}
	return nil
}

func validateName(name string, maxLen int) error {
	switch {
	case name == "":
		return errors.New("name is empty")
	case len(name) > maxLen:
		return fmt.Errorf("name %q is %d characters, longer than %d", name, len(name), maxLen)
	case !toolNamePattern.MatchString(name):
		return fmt.Errorf("name %q may only contain letters, digits, '_' and '-'", name)
	}
	return nil
}

// ToolFunc is the function of a server-executed tool: it receives the
// validated, decoded input and returns an output that is JSON-encoded for
// the model.
type ToolFunc[In, Out any] func(ctx context.Context, in In, tc ToolContext) (Out, error)

// rawFunc is a tool function over raw JSON.
type rawFunc func(ctx context.Context, args json.RawMessage, tc ToolContext) (json.RawMessage, error)

// Tool is a type-erased tool definition. Build one with [NewTool],
// [NewClientTool], [NewRawTool] or [NewRawClientTool]; a Tool is immutable
// and safe for concurrent use.
type Tool struct {
	name        string
	description string
	input       *Schema
	output      *Schema   // nil: the output is unconstrained
	exec        rawFunc   // nil for client-executed, transactional and framework-handled tools
	txExec      rawTxFunc // a transactional tool's function (NewTxTool)
	client      bool
	opts        toolOptions
	subAgent    *Agent // the delegate of a sub-agent tool
	companion   bool   // a companion tool (companion__…)
}

// NewTool defines a server-executed tool. The input JSON Schema is derived
// from In (see [SchemaFor]); In must describe a JSON object (a struct, a
// map or json.RawMessage). Out is JSON-encoded for the model; when it is a
// concrete type its schema documents the output.
func NewTool[In, Out any](name, description string, fn ToolFunc[In, Out], opts ...ToolOption) (*Tool, error) {
	if fn == nil {
		return nil, toolDefError(name, "fn", "the tool function is nil")
	}
	exec := func(ctx context.Context, args json.RawMessage, tc ToolContext) (json.RawMessage, error) {
		return callTyped(name, args, func(in In) (Out, error) { return fn(ctx, in, tc) })
	}
	return newTyped[In, Out](name, description, exec, false, opts)
}

// callTyped decodes a tool's arguments as an In, calls fn with them and
// encodes its Out for the model.
func callTyped[In, Out any](name string, args json.RawMessage, fn func(in In) (Out, error)) (json.RawMessage, error) {
	var in In
	if err := json.Unmarshal(args, &in); err != nil {
		return nil, fmt.Errorf("decode arguments of tool %q: %w", name, err)
	}
	out, err := fn(in)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encode output of tool %q: %w", name, err)
	}
	return b, nil
}

// MustNewTool is NewTool that panics on a definition error, for package-level
// tool variables.
func MustNewTool[In, Out any](name, description string, fn ToolFunc[In, Out], opts ...ToolOption) *Tool {
	return must(NewTool(name, description, fn, opts...))
}

// NewClientTool defines a client-executed tool (the specification's
// execute: 'client'): the model's call suspends the run until the client
// submits a result with SubmitToolResult. The result is validated against
// the schema derived from Out.
func NewClientTool[In, Out any](name, description string, opts ...ToolOption) (*Tool, error) {
	return newTyped[In, Out](name, description, nil, true, opts)
}

// MustNewClientTool is NewClientTool that panics on a definition error.
func MustNewClientTool[In, Out any](name, description string, opts ...ToolOption) *Tool {
	return must(NewClientTool[In, Out](name, description, opts...))
}

// NewRawTool defines a server-executed tool from JSON Schemas and a function
// over raw JSON, for tools declared at run time (configuration files,
// generated wrappers). outputSchema may be nil.
func NewRawTool(name, description string, inputSchema, outputSchema json.RawMessage, fn func(ctx context.Context, args json.RawMessage, tc ToolContext) (json.RawMessage, error), opts ...ToolOption) (*Tool, error) {
	if fn == nil {
		return nil, toolDefError(name, "fn", "the tool function is nil")
	}
	return newRaw(name, description, inputSchema, outputSchema, fn, false, opts)
}

// NewRawClientTool defines a client-executed tool from JSON Schemas.
func NewRawClientTool(name, description string, inputSchema, outputSchema json.RawMessage, opts ...ToolOption) (*Tool, error) {
	return newRaw(name, description, inputSchema, outputSchema, nil, true, opts)
}

func newTyped[In, Out any](name, description string, exec rawFunc, client bool, opts []ToolOption) (*Tool, error) {
	in, err := schemaForType(reflect.TypeFor[In]())
	if err != nil {
		return nil, toolDefError(name, "In", err.Error())
	}
	var out json.RawMessage
	if ot := reflect.TypeFor[Out](); ot.Kind() != reflect.Interface && ot != rawMessageType {
		if out, err = schemaForType(ot); err != nil {
			return nil, toolDefError(name, "Out", err.Error())
		}
	}
	return newRaw(name, description, in, out, exec, client, opts)
}

func newRaw(name, description string, inputSchema, outputSchema json.RawMessage, exec rawFunc, client bool, opts []ToolOption) (*Tool, error) {
	if err := ValidateToolName(name); err != nil {
		return nil, toolDefError(name, "name", err.Error())
	}
	return build(name, description, inputSchema, outputSchema, exec, client, opts)
}

// build assembles a tool without the user-name checks (framework tools use
// it directly).
func build(name, description string, inputSchema, outputSchema json.RawMessage, exec rawFunc, client bool, opts []ToolOption) (*Tool, error) {
	t := &Tool{name: name, description: description, exec: exec, client: client}
	for _, o := range opts {
		if o != nil {
			o(&t.opts)
		}
	}
	var err error
	if t.input, err = CompileSchema(inputSchema); err != nil {
		return nil, toolDefError(name, "input schema", err.Error())
	}
	if !t.input.IsObject() {
		return nil, toolDefError(name, "input schema",
			"tool arguments are JSON objects: use a struct, a map or json.RawMessage as the input type, got schema "+string(t.input.Raw()))
	}
	if len(outputSchema) > 0 {
		if t.output, err = CompileSchema(outputSchema); err != nil {
			return nil, toolDefError(name, "output schema", err.Error())
		}
	}
	o := t.opts
	switch {
	case client && o.finishWith:
		return nil, toolDefError(name, "FinishWith", "a client-executed tool cannot finish the agent (finishWith with execute: client is rejected)")
	case client && o.approval != approvalNone:
		return nil, toolDefError(name, "RequireApproval", "a client-executed tool cannot require approval: the client already decides")
	case o.finishWith && o.approval != approvalNone:
		return nil, toolDefError(name, "RequireApproval", "a finishWith tool cannot require approval")
	case o.timeoutSet && !client:
		return nil, toolDefError(name, "ClientTimeout", "only client-executed tools have a client deadline")
	case o.timeoutSet && o.clientTimeout <= 0:
		return nil, toolDefError(name, "ClientTimeout", fmt.Sprintf("the deadline must be positive, got %s", o.clientTimeout))
	case o.txOptionSet && !o.transactional:
		return nil, toolDefError(name, "TxIsolation/TxTimeout", "only transactional tools (NewTxTool) have a transaction")
	case o.txTimeoutSet && o.txTimeout <= 0:
		return nil, toolDefError(name, "TxTimeout", fmt.Sprintf("the timeout must be positive, got %s", o.txTimeout))
	case o.cancelOnInterrupt && (client || o.transactional):
		return nil, toolDefError(name, "CancelOnInterrupt", "only a tool that runs in the engine outside a transaction can be cancelled by an interrupt")
	}
	return t, nil
}

func toolDefError(name, field, reason string) error {
	return &DefinitionError{Kind: "tool", Name: name, Field: field, Reason: reason}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Name returns the tool's name.
func (t *Tool) Name() string { return t.name }

// Description returns the tool's description.
func (t *Tool) Description() string { return t.description }

// InputSchema returns the JSON Schema of the tool's arguments.
func (t *Tool) InputSchema() json.RawMessage { return t.input.Raw() }

// OutputSchema returns the JSON Schema of the tool's output, or nil when the
// output is unconstrained.
func (t *Tool) OutputSchema() json.RawMessage {
	if t.output == nil {
		return nil
	}
	return t.output.Raw()
}

// Spec returns the tool as a model sees it.
func (t *Tool) Spec() ToolSpec {
	return ToolSpec{Name: t.name, Description: t.description, InputSchema: t.InputSchema()}
}

// ExecutesOnClient reports whether the tool is client-executed.
func (t *Tool) ExecutesOnClient() bool { return t.client }

// ClientTimeout returns the client deadline, 0 for none.
func (t *Tool) ClientTimeout() time.Duration { return t.opts.clientTimeout }

// IsFinishWith reports whether a successful call finishes the agent.
func (t *Tool) IsFinishWith() bool { return t.opts.finishWith }

// CancelsOnInterrupt reports whether the session's interrupt cancels a
// running call (CancelOnInterrupt).
func (t *Tool) CancelsOnInterrupt() bool { return t.opts.cancelOnInterrupt }

// NeedsApprovalCheck reports whether calls are approval-gated (always or by
// predicate).
func (t *Tool) NeedsApprovalCheck() bool { return t.opts.approval != approvalNone }

// HasApprovalPredicate reports whether the approval gate is a predicate
// (RequireApprovalWhen) rather than always on.
func (t *Tool) HasApprovalPredicate() bool { return t.opts.approval == approvalPredicate }

// ValidateArguments checks args against the input schema and returns a
// *ValidationError listing every violation, or nil.
func (t *Tool) ValidateArguments(args json.RawMessage) error {
	return t.input.Validate(fmt.Sprintf("arguments of tool %q", t.name), args)
}

// ValidateOutput checks a tool output (for example a client's submitted
// result) against the output schema. Without one it only requires JSON.
func (t *Tool) ValidateOutput(out json.RawMessage) error {
	subject := fmt.Sprintf("output of tool %q", t.name)
	if t.output == nil {
		if !json.Valid(out) {
			return &ValidationError{Subject: subject, Violations: []Violation{{Message: "not valid JSON"}}}
		}
		return nil
	}
	return t.output.Validate(subject, out)
}

// RequiresApproval evaluates the tool's approval gate for one call. It fails
// closed: invalid arguments, a predicate error or a predicate panic all mean
// approval is required, and the problem is returned alongside true so the
// caller can log it.
func (t *Tool) RequiresApproval(ctx context.Context, args json.RawMessage, tc ToolContext) (required bool, err error) {
	switch t.opts.approval {
	case approvalNone:
		return false, nil
	case approvalAlways:
		return true, nil
	}
	if err := t.ValidateArguments(args); err != nil {
		return true, err
	}
	defer func() {
		if r := recover(); r != nil {
			required, err = true, newPanicError(t.name, "approval predicate", r)
		}
	}()
	ok, err := t.opts.predicate(ctx, args, tc)
	if err != nil {
		return true, fmt.Errorf("approval predicate of tool %q: %w", t.name, err)
	}
	return ok, nil
}

// Execute validates args, runs the tool's function and returns its JSON
// output. A panic in the function is recovered and returned as a
// *ToolPanicError: a tool never crashes the process. Client-executed tools
// cannot be executed here.
func (t *Tool) Execute(ctx context.Context, args json.RawMessage, tc ToolContext) (out json.RawMessage, err error) {
	if t.exec == nil {
		if t.txExec != nil {
			return nil, fmt.Errorf("tool %q is transactional: the engine runs it in a transaction (ExecuteTx)", t.name)
		}
		if t.client {
			return nil, fmt.Errorf("tool %q executes on the client: submit its result with SubmitToolResult", t.name)
		}
		if t.companion {
			return nil, fmt.Errorf("tool %q manages companions: the engine handles it, not Execute", t.name)
		}
		if t.subAgent != nil {
			return nil, fmt.Errorf("tool %q runs the %s agent as a child session: the engine runs it, not Execute", t.name, t.subAgent.Name)
		}
		return nil, fmt.Errorf("tool %q is handled by the runtime and has no function", t.name)
	}
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	if err := t.ValidateArguments(args); err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, newPanicError(t.name, "tool", r)
		}
	}()
	if tc != nil {
		ctx = WithToolContext(ctx, tc)
	}
	return t.exec(ctx, args, tc)
}

// ToolPanicError reports a panic inside a tool function or an approval
// predicate, recovered so the process keeps running. The model sees it as a
// tool error.
type ToolPanicError struct {
	Tool  string
	Where string // "tool" or "approval predicate"
	Value string // the panic value, formatted
	Stack string
}

func newPanicError(tool, where string, v any) *ToolPanicError {
	return &ToolPanicError{Tool: tool, Where: where, Value: fmt.Sprint(v), Stack: string(debug.Stack())}
}

func (e *ToolPanicError) Error() string {
	return fmt.Sprintf("%s %q panicked: %s", e.Where, e.Tool, e.Value)
}
