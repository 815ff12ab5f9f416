package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/server"
)

// A server whose engine admits sessions through a queue with one slot:
// a second session waits as queued (GET /status says where, its stream
// starts with run_queued, /metrics counts it), a retried POST /start of it
// is refused and runs nothing, and it runs once the slot frees.
func TestQueuedSessionOverHTTP(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	calls := map[string]int{}
	called := make(chan string, 10)
	slow := &helix.Agent{Name: "slow", Model: helix.ModelFunc(func(ctx context.Context, req helix.ModelRequest, _ helix.StreamCallbacks) (helix.StepResult, error) {
		called <- req.AgentID
		select {
		case <-release:
		case <-ctx.Done():
			return helix.StepResult{}, ctx.Err()
		}
		return helix.StepResult{Type: helix.StepText, Content: "done", StopReason: helix.StopEndTurn}, nil
	})}
	h := newHarnessQueued(t, "", "", server.Config{Agents: []*helix.Agent{slow}, DatabaseMetricsMaxAge: time.Nanosecond}, nil,
		&engine.QueueConfig{WorkerConcurrency: 1, PollingInterval: 20 * time.Millisecond})

	first, _ := h.start("alice", map[string]any{"agentType": "slow", "message": "one", "sessionId": "first"})
	calls[<-called]++
	second, run := h.start("bob", map[string]any{"agentType": "slow", "message": "two", "sessionId": "second"})
	res := h.waitStatus("bob", second, "queued")
	q := res.body["queue"].(map[string]any)
	require.Equal(t, engine.DefaultQueueName, q["queue"])
	require.Equal(t, "bob", q["partitionKey"], "the principal is the partition")
	require.EqualValues(t, 0, q["ahead"])
	require.Equal(t, "running", h.status("alice", first).body["status"])

	st := openSSE(t, h.ts.URL, "sessionId="+second, "bob")
	ev := st.until(func(sseEvent) bool { return true })[0]
	require.Equal(t, "run_queued", ev.chunkType(), "the stream of a queued run starts with run_queued")
	require.Equal(t, run, ev.data["chunk"].(map[string]any)["runId"])

	// The run is reported queued from the moment /start returns; its
	// driver enqueues the segment a moment later (under load, after the
	// first scrape: seen in 3 of 40 runs with the CPUs busy).
	eventually(t, "the second run's segment in the queue", func() bool {
		return h.metricValue(`helix_queue_depth{queue="helix-sessions"}`) == 1
	})
	h.requireMetric(`helix_queue_running{queue="helix-sessions"}`, 1.0)
	require.Greater(t, h.metricValue(`helix_queue_oldest_wait_seconds{queue="helix-sessions"}`), 0.0)

	retry := h.do(http.MethodPost, "/start", "bob", map[string]any{"agentType": "slow", "message": "two", "sessionId": "second"})
	require.Equal(t, http.StatusConflict, retry.status, "body: %s", retry.raw)
	require.Equal(t, "already_running", retry.errCode())

	close(release)
	h.waitStatus("alice", first, "completed")
	h.waitStatus("bob", second, "completed")
	calls[<-called]++
	require.Equal(t, map[string]int{"first": 1, "second": 1}, calls, "each session called its model once")
	h.requireMetric(`helix_queue_started_last_minute{queue="helix-sessions"}`, 2.0)
}
