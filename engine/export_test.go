package engine

import "github.com/helix-agents/helix-dbos/store/postgres"

// StoreOf returns an engine's store, for the engine's black-box tests that
// check what it wrote (the store is not part of the engine's API).
func StoreOf(e *Engine) *postgres.Store { return e.store }
