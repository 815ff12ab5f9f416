package helix

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ToolOption configures a tool at definition time.
type ToolOption func(*toolOptions)

type approvalMode int

const (
	approvalNone approvalMode = iota
	approvalAlways
	approvalPredicate
)

type toolOptions struct {
	finishWith    bool
	approval      approvalMode
	predicate     func(ctx context.Context, args json.RawMessage, tc ToolContext) (bool, error)
	clientTimeout time.Duration
	timeoutSet    bool
	// cancelOnInterrupt: CancelOnInterrupt.
	cancelOnInterrupt bool
	// A transactional tool's (tool_tx.go).
	transactional bool
	txIsolation   pgx.TxIsoLevel
	txTimeout     time.Duration
	txTimeoutSet  bool
	txOptionSet   bool
}

// FinishWith makes the tool end the agent's turn when it succeeds: its
// output becomes the agent's output. FinishWith tools run after the step's
// other tools and see their state changes. Not allowed on client-executed or
// approval-gated tools.
func FinishWith() ToolOption { return func(o *toolOptions) { o.finishWith = true } }

// CancelOnInterrupt makes the engine cancel a call's context when the
// session is interrupted while the call runs (it looks a few times a
// second): for a tool that waits on something slow, such as a remote
// server (the MCP tools, helix.SourceTool.Tool, have it). The cancelled
// call's error, which the model reads after a resume, says the session
// was interrupted. Not for transactional or client-executed tools.
func CancelOnInterrupt() ToolOption { return func(o *toolOptions) { o.cancelOnInterrupt = true } }

// RequireApproval makes every call of the tool wait for an approval
// decision (submitted with SubmitToolResult) before it executes. A denied
// call never executes; the model sees "Tool call was not approved by the
// user".
func RequireApproval() ToolOption { return func(o *toolOptions) { o.approval = approvalAlways } }

// RequireApprovalWhen gates the tool on a predicate of its validated input.
// The runtime evaluates it in a durable step (its answer is checkpointed) and
// fails closed: a predicate that returns an error or panics means approval
// is required.
func RequireApprovalWhen[In any](pred func(ctx context.Context, in In, tc ToolContext) (bool, error)) ToolOption {
	return func(o *toolOptions) {
		if pred == nil {
			o.approval = approvalAlways
			return
		}
		o.approval = approvalPredicate
		o.predicate = func(ctx context.Context, args json.RawMessage, tc ToolContext) (bool, error) {
			var in In
			if err := json.Unmarshal(args, &in); err != nil {
				return true, fmt.Errorf("decode input for approval predicate: %w", err)
			}
			return pred(ctx, in, tc)
		}
	}
}

// ClientTimeout sets how long a client-executed tool call may wait for its
// result. The deadline is measured on durable time (it survives restarts);
// when it passes the model sees a tool error with code client_tool_timeout.
// Only valid on client-executed tools; d must be positive.
func ClientTimeout(d time.Duration) ToolOption {
	return func(o *toolOptions) { o.clientTimeout, o.timeoutSet = d, true }
}
