// Package steps holds the bodies of the durable steps of the agent loop: the
// model call, a tool call, the per-step commit transaction, the terminal
// transitions, the hook firing and the human-in-the-loop steps (the approval
// gate, the suspension and the resolution of a wait). Workflow bodies (package workflows) run
// them through DBOS under the constant names declared here, so a replay
// finds every step under the same name whatever the Go symbols are called.
//
// Step inputs and outputs are plain JSON-round-trippable values: DBOS
// checkpoints them. A domain outcome (a model error, a tool error) is data in
// the output, never a Go error: Go errors are reserved for infrastructure
// failures, which DBOS retries or which fail the workflow.
//
// The loop's telemetry lives here too (Telemetry: its spans' tracer and its
// Prometheus instruments, LogHook): a side channel that changes no step's
// input or output. Spans of model and tool calls start inside the step
// bodies, so a step replayed from its record is not traced again.
//
// Import rule: helix, store, store/postgres, internal packages, DBOS,
// OpenTelemetry's trace API and Prometheus; never engine or workflows.
package steps
