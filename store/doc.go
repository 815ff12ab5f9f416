// Package store defines the persistence contracts of helix-dbos: the
// [SessionStore] that holds sessions, messages, runs, checkpoints, sub-agent
// references, staged changes and usage, and the [StreamStore] that holds each
// session's ordered event stream.
//
// The contracts follow the session model of the Helix Agents specification:
// the session ID keys everything, messages are an append-only log stored once
// per session, and checkpoints point into that log instead of copying it.
//
// # Idempotency contracts
//
// Every state-changing method documents what happens when it is retried
// after a lost commit acknowledgement, on a duplicate key and under a
// concurrent writer. The durable runtime depends on these guarantees: DBOS
// re-executes a step whose completion was not checkpointed, so store calls
// made from steps must either be idempotent or run inside the step's own
// transaction (see package store/postgres, Store.WithQuerier).
//
// # Versions
//
// Every write to a session's row bumps SessionState.Version, except the
// durable interrupt flag, which is a side channel: setting it must never make
// the running step's versioned commit stale. Versioned writes
// (SaveState, CompareAndSetStatus, Commit with an expected version) fail with
// *helix.StaleStateError when another writer got there first.
//
// Package store/storetest holds the contract suite every implementation must
// pass; store/postgres is the implementation.
//
// Import rule: this package imports helix and the standard library only.
package store
