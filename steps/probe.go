package steps

import (
	"context"
	"fmt"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
)

// ProbePoint names a point of the agent loop at which a test kit may stop
// a run as a crash of its process would (package helixtest's crash
// points; Env.Probe).
type ProbePoint string

// The points the loop offers.
const (
	// ProbeAfterModelCall: the model step of a step returned, before any
	// of its tools ran. Its record is written when the step has tools
	// that run application code; otherwise (a text answer, client tools,
	// approvals) it goes with the step's next write, and a crash here
	// calls the model again.
	ProbeAfterModelCall ProbePoint = "after_model_call"
	// ProbeAfterTool: a tool returned, inside its step: its effects are
	// done, its result is not recorded yet (it commits with the step), so
	// a crash here runs it again (tools are at least once: that is what
	// ToolContext.IdempotencyKey is for).
	ProbeAfterTool ProbePoint = "after_tool"
	// ProbeAfterToolCommit: a transactional tool's transaction committed
	// its writes with its record: a crash here never runs it again (the
	// replay returns the recorded result). A step's lone transactional
	// call commits in the step's commit, so this comes right after that
	// commit, before ProbeAfterCommit; parallel calls commit before it.
	ProbeAfterToolCommit ProbePoint = "after_tool_commit"
	// ProbeAfterCommit: the step committed, before the next step (and
	// before the hooks of the step).
	ProbeAfterCommit ProbePoint = "after_commit"
)

// ProbeInfo says where the loop is when it calls Env.Probe.
type ProbeInfo struct {
	Point     ProbePoint
	SessionID string
	RunID     string
	// Step is the step's number in the session (the commit's step count).
	Step int
	// ToolCallID and ToolName are set at ProbeAfterTool and
	// ProbeAfterToolCommit.
	ToolCallID string
	ToolName   string
}

// ProbeStop is the error a probe returns to stop the run there: the run's
// execution ends at once and records nothing more, as an execution fenced
// off by another engine does (it matches dbos.ErrConflictingWorkflowID), and
// its workflow stays pending for whichever engine recovers it.
func ProbeStop(at ProbeInfo) error {
	return &dbos.Error{Code: dbos.ErrorCodeConflictingID,
		Message: fmt.Sprintf("helix: run %s stopped by a probe at %s of step %d (a simulated crash)", at.RunID, at.Point, at.Step)}
}

// CallProbe calls the Env's Probe, if any, at one of the loop's points.
func (e *Env) CallProbe(ctx context.Context, at ProbeInfo) error {
	if e.Probe == nil {
		return nil
	}
	return e.Probe(ctx, at)
}
