package engine_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
)

// Every process gets a new executor ID unless one is configured: replicas
// started with a zero Config never collide.
func ExampleDefaultExecutorID() {
	id := engine.DefaultExecutorID()
	host, _ := os.Hostname()
	fmt.Println(strings.HasPrefix(id, fmt.Sprintf("%s-%d-", host, os.Getpid())), id != engine.DefaultExecutorID())
	// Output: true true
}

// A replica of a cluster: every replica runs this with the same agents on
// one database. A replica that stops or dies has its sessions taken over
// by a live one (at once after a clean stop, after the lease otherwise).
func ExampleConfig_cluster() {
	ctx := context.Background()
	eng, err := engine.New(ctx, engine.Config{
		DatabaseURL:   os.Getenv("HELIX_DATABASE_URL"),
		ExecutorLease: 15 * time.Second, // default 30 s; heartbeats every 5 s
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = eng.Shutdown(ctx) }()
	// eng.Register(yourAgents...) in every replica, then:
	if err := eng.Launch(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("replica", eng.ExecutorID(), "is up")
}

// A step of a session this process no longer owns fails with
// *TakenOverError, which DBOS treats as a lost ownership: it records
// nothing for the step and waits for the new owner's outcome.
func ExampleTakenOverError() {
	err := fmt.Errorf("store: write to stream s-1: %w", &engine.TakenOverError{})
	var taken *engine.TakenOverError
	fmt.Println(errors.As(err, &taken), errors.Is(err, dbos.ErrConflictingWorkflowID))
	// Output: true true
}

// A pool shared with your application (Config.Pool) gets the engine's
// handling of database restarts and failovers from ConfigurePool.
func ExampleConfigurePool() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig("postgres://app@127.0.0.1:5432/app?pool_max_conns=20")
	if err != nil {
		fmt.Println(err)
		return
	}
	engine.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg) // connects lazily
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	fmt.Println(pool.Config().MaxConns)
	// eng, err := engine.New(ctx, engine.Config{Pool: pool})
	// Output: 20
}

// A replica that admits its sessions through a durable queue: at most 32
// run at once in this process, 200 in the cluster, 24 per tenant here, and
// the model provider sees at most 600 segment starts a minute. Sessions
// waiting for people hold no slot.
func ExampleQueueConfig() {
	ctx := context.Background()
	eng, err := engine.New(ctx, engine.Config{
		DatabaseURL: os.Getenv("HELIX_DATABASE_URL"),
		Queue: &engine.QueueConfig{
			WorkerConcurrency:          32,
			GlobalConcurrency:          200,
			PartitionWorkerConcurrency: 24,
			RateLimit:                  600,
			RatePeriod:                 time.Minute,
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = eng.Shutdown(ctx) }()
	// After eng.Register and eng.Launch, a run of tenant "acme" at normal
	// priority (lower runs first):
	//
	//	h, err := eng.Execute(ctx, agent, engine.Input{Message: "hi"},
	//		&engine.ExecuteOptions{UserID: "u-1", PartitionKey: "acme", Priority: 10})
	//	state, err := eng.Queued(ctx, h.SessionID) // nil once it runs
}

// A queue's limits are checked before anything connects.
func ExampleQueueConfig_invalid() {
	_, err := engine.New(context.Background(), engine.Config{
		DatabaseURL: "postgres://127.0.0.1:1/none",
		Queue:       &engine.QueueConfig{WorkerConcurrency: 16, GlobalConcurrency: 8},
	})
	fmt.Println(err)
	// Output: engine: Config.Queue: GlobalConcurrency (8) must be at least WorkerConcurrency (16)
}

// A Probe stops a run at a point of the loop, as a crash of the process
// would (the test kit's crash points are built on it): ProbeStop's error is
// a fencing error, so the run's execution ends without recording anything
// more and its workflow stays pending for the engine that recovers it.
func ExampleProbeStop() {
	cfg := engine.Config{DatabaseURL: "postgres://localhost/helix"}
	cfg.Probe = func(_ context.Context, at engine.ProbeInfo) error {
		if at.Point == engine.ProbeAfterTool && at.ToolName == "charge" {
			return engine.ProbeStop(at)
		}
		return nil
	}
	err := cfg.Probe(context.Background(), engine.ProbeInfo{Point: engine.ProbeAfterTool, ToolName: "charge", RunID: "r-1", Step: 2})
	fmt.Println(errors.Is(err, dbos.ErrConflictingWorkflowID))
	// Output: true
}

// Tracing: give the engine a tracer provider (or install one with
// otel.SetTracerProvider). Every run, step, model call, tool call and wait
// for a person becomes a span, one trace per session; a ctx with a span
// (an incoming request's) makes a new session continue its trace.
func ExampleConfig_tracing() {
	ctx := context.Background()
	exporter, err := otlptracehttp.New(ctx) // OTEL_EXPORTER_OTLP_ENDPOINT, …
	if err != nil {
		fmt.Println(err)
		return
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter))
	defer func() { _ = tp.Shutdown(ctx) }() // flushes, after the engine's Shutdown
	eng, err := engine.New(ctx, engine.Config{DatabaseURL: os.Getenv("HELIX_DATABASE_URL"), TracerProvider: tp})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = eng.Shutdown(ctx) }()
	fmt.Println("tracing to", os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
}

// An application that embeds the engine without package server registers
// its metrics in its own registry.
func ExampleEngine_Metrics() {
	ctx := context.Background()
	eng, err := engine.New(ctx, engine.Config{DatabaseURL: os.Getenv("HELIX_DATABASE_URL")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = eng.Shutdown(ctx) }()
	reg := prometheus.NewRegistry()
	reg.MustRegister(eng.Metrics())
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
}

// DeleteSession deletes a root session with its sub-agents, companions and
// DBOS workflows. A session with a run in progress is refused until the
// caller stops it, or deletes with Force; a session already gone is
// reported in NotFound, not as an error.
func ExampleEngine_DeleteSession() {
	ctx := context.Background()
	eng, err := engine.New(ctx, engine.Config{DatabaseURL: os.Getenv("HELIX_DATABASE_URL")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = eng.Shutdown(ctx) }()
	if err := eng.Launch(ctx); err != nil {
		fmt.Println(err)
		return
	}
	stats, err := eng.DeleteSession(ctx, "s-1", nil)
	if errors.Is(err, helix.ErrSessionRunning) {
		// Running, queued or waiting for a person: abort it and delete.
		stats, err = eng.DeleteSession(ctx, "s-1", &engine.DeleteOptions{Force: true})
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	if len(stats.NotFound) > 0 {
		fmt.Println("s-1 was already gone")
		return
	}
	fmt.Printf("deleted %d sessions, %d workflows, %d messages\n", stats.Sessions, stats.Workflows, stats.Rows["helix.messages"])
}
