package helix

import (
	"context"
	"fmt"
)

// ToolContext is what a tool's function receives besides its input. The
// engine implements it; tests of a tool may use any implementation.
type ToolContext interface {
	SessionID() string
	RunID() string
	AgentType() string
	ToolCallID() string
	ToolName() string
	// Step is the step number within the current turn.
	Step() int
	// IdempotencyKey is stable across replays of the same tool call (the
	// workflow ID plus the step ID): pass it to external systems so a tool
	// re-executed after a crash does not act twice.
	IdempotencyKey() string
	// GetState decodes the session's custom state into into (a pointer).
	GetState(into any) error
	// SetState replaces the custom state with state (JSON-encoded). The
	// runtime records the change as RFC 6902 patches, emits them as a
	// state_patch chunk and commits them with the step.
	SetState(state any) error
	// Emit sends a custom event (a `custom` chunk) to the session's stream.
	Emit(eventName string, data any) error
}

// GetState decodes the custom state as an S.
func GetState[S any](tc ToolContext) (S, error) {
	var s S
	if err := tc.GetState(&s); err != nil {
		return s, fmt.Errorf("helix: read custom state as %T: %w", s, err)
	}
	return s, nil
}

// UpdateState reads the custom state as an S, lets fn change it and writes it
// back. When fn returns an error nothing is written.
func UpdateState[S any](tc ToolContext, fn func(state *S) error) error {
	s, err := GetState[S](tc)
	if err != nil {
		return err
	}
	if err := fn(&s); err != nil {
		return err
	}
	return tc.SetState(s)
}

// contextKey types keep context values private to this package.
type contextKey struct{ name string }

var toolContextKey = &contextKey{"tool-context"}

// WithToolContext returns ctx carrying tc, so code deep inside a tool can
// reach it with ToolContextFrom.
func WithToolContext(ctx context.Context, tc ToolContext) context.Context {
	return context.WithValue(ctx, toolContextKey, tc)
}

// ToolContextFrom returns the ToolContext carried by ctx, if any.
func ToolContextFrom(ctx context.Context) (ToolContext, bool) {
	tc, ok := ctx.Value(toolContextKey).(ToolContext)
	return tc, ok
}
