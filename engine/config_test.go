package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/engine"
)

// A Config mistake is reported by New before anything connects, saying
// which field and what is allowed.
func TestConfigIsValidated(t *testing.T) {
	t.Parallel()
	const url = "postgres://127.0.0.1:1/none"
	for _, tc := range []struct {
		cfg  engine.Config
		want string
	}{
		{engine.Config{}, "engine: no database: set Config.DatabaseURL or Config.Pool"},
		{engine.Config{DatabaseURL: url, ExecutorLease: time.Millisecond}, "Config.ExecutorLease must be at least 1s"},
		{engine.Config{DatabaseURL: url, AdoptVersions: []string{""}}, "Config.AdoptVersions[0] is empty"},
		{engine.Config{DatabaseURL: url, AdoptVersions: []string{"old", engine.DefaultApplicationVersion}},
			`Config.AdoptVersions[1] is this engine's own version "helix-dbos-v1": list earlier versions only`},
		{engine.Config{DatabaseURL: url, Queue: &engine.QueueConfig{Name: "has space"}}, `Name "has space" is not a queue name`},
		{engine.Config{DatabaseURL: url, Queue: &engine.QueueConfig{Name: "_dbos_internal_queue"}}, "is DBOS's own queue"},
		{engine.Config{DatabaseURL: url, Queue: &engine.QueueConfig{WorkerConcurrency: -1}}, "must not be negative"},
		{engine.Config{DatabaseURL: url, Queue: &engine.QueueConfig{WorkerConcurrency: 4, PartitionWorkerConcurrency: 5}},
			"PartitionWorkerConcurrency (5) must be at most WorkerConcurrency (4)"},
		{engine.Config{DatabaseURL: url, Queue: &engine.QueueConfig{PartitionWorkerConcurrency: 4, PartitionConcurrency: 2}},
			"PartitionConcurrency (2) must be at least PartitionWorkerConcurrency (4)"},
		{engine.Config{DatabaseURL: url, Queue: &engine.QueueConfig{GlobalConcurrency: 40, PartitionConcurrency: 50}},
			"PartitionConcurrency (50) must be at most GlobalConcurrency (40)"},
		{engine.Config{DatabaseURL: url, Queue: &engine.QueueConfig{RateLimit: 10}}, "set RateLimit and RatePeriod together (got 10 per 0s)"},
	} {
		_, err := engine.New(context.Background(), tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
}
