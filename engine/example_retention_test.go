package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/helix-agents/helix-dbos/engine"
)

// A retention policy keeps completed sessions 30 days, failed ones 90 and
// aborted ones 7, and deletes sessions past their expiresAt; every engine
// runs the job, one pass at a time in the cluster. New refuses a policy
// it cannot run.
func ExampleRetentionPolicy() {
	policy := &engine.RetentionPolicy{
		Completed: 30 * 24 * time.Hour,
		Failed:    90 * 24 * time.Hour,
		Aborted:   7 * 24 * time.Hour,
		Interval:  100 * time.Millisecond, // too often
	}
	_, err := engine.New(context.Background(), engine.Config{DatabaseURL: "postgres://127.0.0.1:1/none", Retention: policy})
	fmt.Println(err)
	// Output: engine: Config.Retention.Interval must be at least 1s (0 means the default 10m0s), got 100ms
}

// CollectGarbage runs one pass now: a dry run first, to see what it
// would delete, then the deletion.
func ExampleEngine_CollectGarbage() {
	ctx := context.Background()
	eng, err := engine.New(ctx, engine.Config{DatabaseURL: os.Getenv("HELIX_DATABASE_URL")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = eng.Shutdown(ctx) }()
	policy := engine.RetentionPolicy{Completed: 30 * 24 * time.Hour, Failed: 30 * 24 * time.Hour}
	dry, err := eng.CollectGarbage(ctx, policy, &engine.GCOptions{DryRun: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("would delete %d trees (%d sessions, %d bytes)\n", dry.Trees, dry.Sessions, dry.TotalBytes())
	res, err := eng.CollectGarbage(ctx, policy, nil)
	if errors.Is(err, engine.ErrGCBusy) {
		fmt.Println("an engine's retention job is running a pass: try later")
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("deleted %d trees, %d skipped (a run started)\n", res.Trees, len(res.Skipped))
}
