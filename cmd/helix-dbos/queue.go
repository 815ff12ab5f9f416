package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/helix-agents/helix-dbos/engine"
)

// queueOff is the --queue value that runs every session at once.
const queueOff = "off"

// checkQueueName accepts a queue name or "off" (the engine validates the
// name's form).
func checkQueueName(v any) error {
	if s, ok := v.(string); ok && strings.TrimSpace(s) != s {
		return fmt.Errorf("want a queue name without surrounding spaces, got %q", s)
	}
	return nil
}

// checkNonNegative accepts 0 or more.
func checkNonNegative(v any) error {
	if n, ok := v.(int); ok && n < 0 {
		return fmt.Errorf("want 0 or more, got %d", n)
	}
	return nil
}

// checkRateLimit accepts "" or N/PERIOD.
func checkRateLimit(v any) error {
	s, _ := v.(string)
	_, _, err := parseRateLimit(s)
	return err
}

// parseRateLimit parses N/PERIOD ("60/1m"; "" for none).
func parseRateLimit(s string) (int, time.Duration, error) {
	if s == "" {
		return 0, 0, nil
	}
	n, p, ok := strings.Cut(s, "/")
	limit, err := strconv.Atoi(strings.TrimSpace(n))
	if !ok || err != nil || limit <= 0 {
		return 0, 0, fmt.Errorf("want N/PERIOD with N a positive number, such as 60/1m, got %q", s)
	}
	period, err := time.ParseDuration(strings.TrimSpace(p))
	if err != nil || period <= 0 {
		return 0, 0, fmt.Errorf("want N/PERIOD with PERIOD a positive duration, such as 60/1m, got %q", s)
	}
	return limit, period, nil
}

// addQueueFlags adds serve's queue flags; bare (for `config`) gives them
// no defaults.
func addQueueFlags(f *pflag.FlagSet, bare bool) {
	name, conc, poll := engine.DefaultQueueName, engine.DefaultWorkerConcurrency, engine.DefaultQueuePollingInterval
	if bare {
		name, conc, poll = "", 0, 0
	}
	f.String("queue", name, "the DBOS queue that admits sessions; "+queueOff+" runs each session at once, as it arrives (env HELIX_QUEUE)")
	f.Int("queue-concurrency", conc, "queued sessions this process runs at once; waits for people hold no slot (env HELIX_QUEUE_CONCURRENCY)")
	f.Int("queue-global-concurrency", 0, "queued sessions the whole cluster runs at once, 0 for no cap (env HELIX_QUEUE_GLOBAL_CONCURRENCY)")
	f.Int("queue-partition-concurrency", 0, "sessions of one principal the cluster runs at once, 0 for no cap (env HELIX_QUEUE_PARTITION_CONCURRENCY)")
	f.Int("queue-partition-worker-concurrency", 0, "sessions of one principal this process runs at once, 0 for --queue-concurrency "+
		"(env HELIX_QUEUE_PARTITION_WORKER_CONCURRENCY)")
	f.String("queue-rate-limit", "", "at most N segment starts per PERIOD across the cluster, as N/PERIOD (60/1m): a model provider's limit (env HELIX_QUEUE_RATE_LIMIT)")
	f.Duration("queue-polling-interval", poll, "how often this process polls the queue (env HELIX_QUEUE_POLLING_INTERVAL)")
}

// queueConfig is the engine's queue of serve's configuration: nil with
// --queue off.
func (c config) queueConfig() (*engine.QueueConfig, error) {
	if c.Queue == queueOff {
		return nil, nil
	}
	limit, period, err := parseRateLimit(c.QueueRateLimit)
	if err != nil {
		return nil, fmt.Errorf("queue-rate-limit: %w", err)
	}
	return &engine.QueueConfig{
		Name: c.Queue, WorkerConcurrency: c.QueueConcurrency, GlobalConcurrency: c.QueueGlobalConcurrency,
		PartitionConcurrency: c.QueuePartitionConcurrency, PartitionWorkerConcurrency: c.QueuePartitionWorkerConcurrency,
		RateLimit: limit, RatePeriod: period, PollingInterval: c.QueuePollingInterval,
	}, nil
}

// describeQueue says what a queue's limits are.
func describeQueue(q *engine.QueueConfig) string {
	conc := q.WorkerConcurrency
	if conc == 0 {
		conc = engine.DefaultWorkerConcurrency
	}
	parts := []string{fmt.Sprintf("%d at once in this process", conc)}
	if q.GlobalConcurrency > 0 {
		parts = append(parts, fmt.Sprintf("%d in the cluster", q.GlobalConcurrency))
	}
	if q.PartitionWorkerConcurrency > 0 {
		parts = append(parts, fmt.Sprintf("%d per principal in this process", q.PartitionWorkerConcurrency))
	}
	if q.PartitionConcurrency > 0 {
		parts = append(parts, fmt.Sprintf("%d per principal in the cluster", q.PartitionConcurrency))
	}
	if q.RateLimit > 0 {
		parts = append(parts, fmt.Sprintf("at most %d starts per %s", q.RateLimit, q.RatePeriod))
	}
	return strings.Join(parts, ", ")
}
