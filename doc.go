// Package helix holds the definitions users write against when they build
// durable LLM agents on helix-dbos: agents, tools, messages, stream chunks,
// statuses, results, the [Model] interface and the errors the runtime returns.
//
// The runtime lives in package engine; this package has no database or DBOS
// dependency, so agent and tool definitions can be shared, unit-tested and
// validated without a running system.
//
// # Wire compatibility
//
// Everything that crosses a process boundary (stream chunks, messages, tool
// calls, statuses, checkpoint IDs) keeps the exact names of the Helix Agents
// specification, so existing Helix clients can read what helix-dbos writes.
// Stream chunks marshal with their "type" discriminator and camelCase fields;
// [UnmarshalChunk] rejects unknown types and malformed payloads with an error
// rather than returning a zero value.
//
// # Durability
//
// Step inputs and outputs are JSON: every type here that the runtime
// checkpoints (messages, [StepResult], [AgentResult]) round-trips through
// encoding/json without loss. Arbitrary JSON values are carried as
// [encoding/json.RawMessage] so they survive checkpointing byte for byte.
//
// Import rule: this package imports only the standard library and the JSON
// Schema libraries. It must never import engine, store or DBOS.
package helix
