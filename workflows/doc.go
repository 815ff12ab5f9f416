// Package workflows holds the DBOS workflow bodies of the agent loop,
// registered under constant names (never derived from Go symbols). Bodies
// are deterministic: every read, write, model call and tool call happens in
// a step of package steps; the body only decides, from recorded step
// outputs, which step comes next.
//
// The loop records its steps in a step journal of its own (journal.go,
// table helix.step_journal) beside the DBOS operations it still uses: the
// journal is the only code here that talks to Postgres directly, and only
// to read and write step records (and a waiting run's wake-up check).
//
// Import rule: helix, steps, recv, store, store/postgres (the journal's
// records, stream appends and wake-ups), pgx and DBOS; never engine.
package workflows
