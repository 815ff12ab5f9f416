package engine

import "github.com/helix-agents/helix-dbos/steps"

// ProbeInfo, ProbePoint and ProbeStop are the agent loop's probe points
// (Config.Probe): see package steps.
type (
	ProbeInfo  = steps.ProbeInfo
	ProbePoint = steps.ProbePoint
)

// The probe points.
const (
	ProbeAfterModelCall  = steps.ProbeAfterModelCall
	ProbeAfterTool       = steps.ProbeAfterTool
	ProbeAfterToolCommit = steps.ProbeAfterToolCommit
	ProbeAfterCommit     = steps.ProbeAfterCommit
)

// ProbeStop is the error a Config.Probe returns to stop a run where it is
// (steps.ProbeStop).
func ProbeStop(at ProbeInfo) error { return steps.ProbeStop(at) }
