package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Durable identities of the floor workflows and the probe table.
const (
	// NoopStepsWorkflow runs N no-op DBOS steps.
	NoopStepsWorkflow = "helix.bench.noop_steps.v1"
	// SkeletonWorkflow runs N agent-step skeletons: the DBOS operations of
	// an agent step (a step, a step through dbos.Go, a transaction) with no
	// work in them.
	SkeletonWorkflow = "helix.bench.agent_step_skeleton.v1"
	// ProbeTable is the table of the single-row commit floor; Run creates
	// and drops it.
	ProbeTable = "helix_bench_commit_probe"

	stepNoop     = "helix.bench.noop"
	stepNoopGo   = "helix.bench.noop_go"
	stepNoopTxn  = "helix.bench.noop_txn"
	floorTimeout = 10 * time.Minute
)

// floors holds the floor workflows of a harness. The workflows stamp the
// time each iteration begins into stamps, which is not durable state: a
// replay would restamp, and the harness never replays them.
type floors struct {
	ds       *dbos.DataSource
	noop     dbos.Workflow[int, int]
	skeleton dbos.Workflow[int, int]

	mu     sync.Mutex
	stamps []time.Time
}

func (f *floors) stamp() {
	f.mu.Lock()
	f.stamps = append(f.stamps, time.Now())
	f.mu.Unlock()
}

// newFloors registers the floor workflows on ctx (before Launch), with a
// DBOS data source on pool for the skeleton's transaction.
func newFloors(ctx dbos.Context, pool *pgxpool.Pool) (*floors, error) {
	ds, err := dbos.NewDataSource(ctx, pool, dbos.WithDataSourceName("helix-bench"))
	if err != nil {
		return nil, fmt.Errorf("bench: DBOS data source: %w", err)
	}
	f := &floors{ds: ds}
	var noopStep dbos.Step[int] = func(context.Context) (int, error) { f.stamp(); return 0, nil }
	f.noop = func(ctx dbos.Context, n int) (int, error) {
		for range n {
			if _, err := dbos.RunAsStep(ctx, noopStep, dbos.WithStepName(stepNoop)); err != nil {
				return 0, err
			}
		}
		return n, nil
	}
	f.skeleton = func(ctx dbos.Context, n int) (int, error) {
		for range n {
			if _, err := dbos.RunAsStep(ctx, noopStep, dbos.WithStepName(stepNoop)); err != nil {
				return 0, err
			}
			ch, err := dbos.Go(ctx, func(context.Context) (int, error) { return 0, nil }, dbos.WithStepName(stepNoopGo))
			if err != nil {
				return 0, err
			}
			if o := <-ch; o.Err != nil {
				return 0, o.Err
			}
			if _, err := dbos.RunAsTransaction(ctx, f.ds, func(context.Context, dbos.Tx) (int, error) { return 0, nil },
				dbos.WithStepName(stepNoopTxn)); err != nil {
				return 0, err
			}
		}
		return n, nil
	}
	dbos.RegisterWorkflow(ctx, f.noop, dbos.WithWorkflowName(NoopStepsWorkflow))
	dbos.RegisterWorkflow(ctx, f.skeleton, dbos.WithWorkflowName(SkeletonWorkflow))
	return f, nil
}

// run runs wf with n iterations and returns the time between consecutive
// iterations (n−1 samples).
func (f *floors) run(ctx dbos.Context, wf dbos.Workflow[int, int], n int) ([]time.Duration, error) {
	f.mu.Lock()
	f.stamps = make([]time.Time, 0, n)
	f.mu.Unlock()
	h, err := dbos.RunWorkflow(ctx, wf, n)
	if err != nil {
		return nil, err
	}
	if _, err := h.GetResult(dbos.WithHandleTimeout(floorTimeout)); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.stamps) != n {
		return nil, fmt.Errorf("bench: floor workflow ran %d iterations, want %d", len(f.stamps), n)
	}
	return gaps(f.stamps), nil
}

func gaps(ts []time.Time) []time.Duration {
	out := make([]time.Duration, 0, max(len(ts)-1, 0))
	for i := 1; i < len(ts); i++ {
		out = append(out, ts[i].Sub(ts[i-1]))
	}
	return out
}

// probeTable creates the probe table of the commit floor and returns a
// function that drops it.
func probeTable(ctx context.Context, pool *pgxpool.Pool) (drop func() error, err error) {
	table := pgx.Identifier{ProbeTable}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (id bigserial PRIMARY KEY)`); err != nil {
		return nil, fmt.Errorf("bench: create probe table %s (the commit floor needs CREATE on the current schema): %w", ProbeTable, err)
	}
	return func() error {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := pool.Exec(cctx, `DROP TABLE IF EXISTS `+table); err != nil {
			return fmt.Errorf("bench: drop probe table: %w", err)
		}
		return nil
	}, nil
}

// commits measures n single-row INSERT commits (autocommit statements) into
// the probe table: one round trip and one WAL flush each, the cheapest
// durable write there is.
func commits(ctx context.Context, pool *pgxpool.Pool, n int) ([]time.Duration, error) {
	insert := `INSERT INTO ` + pgx.Identifier{ProbeTable}.Sanitize() + ` DEFAULT VALUES`
	out := make([]time.Duration, 0, n)
	for range n {
		began := time.Now()
		if _, err := pool.Exec(ctx, insert); err != nil {
			return nil, fmt.Errorf("bench: probe commit: %w", err)
		}
		out = append(out, time.Since(began))
	}
	return out, nil
}

// roundTrips measures n `SELECT 1` statements on the pool: one round trip
// to the server and back with no work and no commit.
func roundTrips(ctx context.Context, pool *pgxpool.Pool, n int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for range n {
		began := time.Now()
		var one int
		if err := pool.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
			return nil, fmt.Errorf("bench: round trip: %w", err)
		}
		out = append(out, time.Since(began))
	}
	return out, nil
}
