package engine

import "github.com/prometheus/client_golang/prometheus"

// Metrics returns the engine's Prometheus instruments as one collector:
// helix_step_duration_seconds, helix_model_call_duration_seconds,
// helix_tool_call_duration_seconds, helix_suspension_wait_seconds,
// helix_run_recoveries_total, helix_executor_takeovers_total and
// helix_takeover_workflows_total (docs/observability.md describes them).
// They count what this process does; their labels are names the
// application defines (agent, model, tool), never session IDs.
//
// `helix-dbos serve` and server.New register it in the server's registry;
// an application that embeds the engine without the server registers it
// in its own (prometheus.MustRegister(eng.Metrics())). Register it once
// per registry.
func (e *Engine) Metrics() prometheus.Collector { return e.env.Telemetry.Metrics }
