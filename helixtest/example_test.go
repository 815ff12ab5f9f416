package helixtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/helixtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

// A test gets its own migrated database: on the server HELIX_DATABASE_URL
// names, or else in the one Postgres container the test binary starts. It
// is dropped when the test passes and kept for inspection when it fails.
func ExampleDatabase() {
	_ = func(t *testing.T) { // a test function of your package
		t.Parallel()
		pool, err := pgxpool.New(t.Context(), helixtest.Database(t))
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close() // every connection closed before the database is dropped

		var sessions int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM helix.sessions`).Scan(&sessions); err != nil {
			t.Fatal(err)
		}
		if sessions != 0 {
			t.Fatalf("a fresh database has %d sessions, want 0", sessions)
		}
	}
}

// Pool is Database with a pool on it, closed at the test's cleanup.
func ExamplePool() {
	_ = func(t *testing.T) {
		t.Parallel()
		pool := helixtest.Pool(t)
		if _, err := pool.Exec(t.Context(), `SELECT 1 FROM helix.sessions`); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMain with Main removes the test binary's Postgres container as soon as
// the tests are done. It is optional: without it the container is removed
// when the test binary exits.
func ExampleMain() {
	_ = func(m *testing.M) { // func TestMain(m *testing.M) in your package
		helixtest.Main(m)
	}
}

// A test runs the application's agent, with its own tools and a scripted
// model, on an engine of its own, and answers an approval the way a user
// would.
func ExampleNewEngine() {
	_ = func(t *testing.T) {
		t.Parallel()
		refund := helix.MustNewTool("refund", "Refund an order",
			func(_ context.Context, in struct{ Order string }, _ helix.ToolContext) (string, error) {
				return "refunded " + in.Order, nil
			}, helix.RequireApproval())
		agent := &helix.Agent{Name: "support", Tools: []*helix.Tool{refund}, Model: scripted.New(
			scripted.Step{ToolCalls: []scripted.Call{{Name: "refund", Args: map[string]string{"Order": "A-1"}}}},
			scripted.Step{Text: "Done: your order is refunded."},
		)}
		e := helixtest.NewEngine(t, helixtest.EngineOptions{}, agent)

		h := e.Start(agent, "refund order A-1")
		e.Approve(h.SessionID, e.AwaitPending(h.SessionID, "").ToolCallID)
		if res := e.Await(h); res.Status != helix.AgentCompleted {
			t.Fatalf("the session ended %s: %s", res.Status, res.Error)
		}
		if msgs := e.Messages(h.SessionID); msgs[len(msgs)-1].Content != "Done: your order is refunded." {
			t.Fatalf("last message: %+v", msgs[len(msgs)-1])
		}
	}
}

// A crash inside a tool, after it ran, and the replacement that takes the
// session over: the tool runs again with the same idempotency key, and an
// idempotent tool applies its effect once.
func ExampleEngine_AwaitCrash() {
	_ = func(t *testing.T, agent *helix.Agent, effects *helixtest.Executions) {
		crash := helixtest.AfterTool("charge")
		e := helixtest.NewEngine(t, helixtest.EngineOptions{CrashAt: &crash}, agent)
		h := e.Start(agent, "charge order A-1")
		e.AwaitCrash()

		r := e.Replacement(helixtest.ReplacementOptions{NewExecutorID: true})
		if res := r.Await(r.Attach(h)); res.Status != helix.AgentCompleted {
			t.Fatalf("the session ended %s: %s", res.Status, res.Error)
		}
		effects.RequireOncePerCall(t, 1)
		r.RequireTranscriptOnce(h.SessionID)
		r.RequireStreamGapFree(h.SessionID)
	}
}
