package engine

import (
	"context"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// StoreOf returns an engine's store, for the engine's black-box tests that
// check what it wrote (the store is not part of the engine's API).
func StoreOf(e *Engine) *postgres.Store { return e.store }

// RecordUnstarted records a run as Execute does and starts nothing, with
// no announcement: what a process that died between Execute's commit and
// its start leaves, for the tests of the recorded-run sweep.
func RecordUnstarted(ctx context.Context, e *Engine, agent *helix.Agent, in Input, opts *ExecuteOptions) (*PendingRun, error) {
	p, _, err := e.recordRun(ctx, agent, in, opts)
	return p, err
}
