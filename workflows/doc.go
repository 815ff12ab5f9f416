// Package workflows holds the DBOS workflow bodies of the agent loop,
// registered under constant names (never derived from Go symbols). Bodies
// are deterministic: every read, write, model call and tool call happens in
// a step of package steps; the body only decides, from checkpointed step
// outputs, which step comes next.
//
// Import rule: helix, steps, recv, store (types only) and DBOS; never
// engine.
package workflows
