package engine_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

// An approval and the app's own audit row in one transaction: both commit
// or neither does, and the waiting run wakes when the transaction commits.
// The transaction is the app's (here from its own pool on the engine's
// database; sqlc's queries.WithTx takes the same pgx.Tx). An answer the
// engine refuses, such as a second answer to a call already answered,
// leaves the transaction usable; the handler rolls its audit row back.
func ExampleEngine_SubmitToolResultTx() {
	ctx := context.Background()
	dbURL := pgtest.ExampleURL()
	eng, err := engine.New(ctx, engine.Config{DatabaseURL: dbURL})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = eng.Shutdown(ctx) }()
	type refundIn struct {
		Order string `json:"order"`
	}
	refund := helix.MustNewTool("refund", "Refund an order", func(_ context.Context, in refundIn, _ helix.ToolContext) (string, error) {
		return "refunded " + in.Order, nil
	}, helix.RequireApproval())
	support := &helix.Agent{
		Name:  "support",
		Tools: []*helix.Tool{refund},
		Model: scripted.New(
			scripted.Step{ToolCalls: []scripted.Call{{ID: "call-1", Name: "refund", Args: refundIn{Order: "A-17"}}}},
			scripted.Step{Text: "Order A-17 is refunded."},
		),
	}
	if err := eng.Register(support); err != nil {
		fmt.Println(err)
		return
	}
	if err := eng.Launch(ctx); err != nil {
		fmt.Println(err)
		return
	}

	// The app's pool and table.
	app, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer app.Close()
	if _, err := app.Exec(ctx, `CREATE TABLE approval_audit (id serial PRIMARY KEY, tool_call_id text NOT NULL, approver text NOT NULL, approved boolean NOT NULL)`); err != nil {
		fmt.Println(err)
		return
	}

	h, err := eng.Execute(ctx, support, engine.Input{Message: "Please refund order A-17."}, &engine.ExecuteOptions{SessionID: "support-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := h.Result(ctx) // returns when the run suspends for the approval
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Status, res.Suspended.ToolCallIDs)

	// The handler of an approver's decision.
	decide := func(ctx context.Context, approver string, sub helix.ToolSubmission) error {
		tx, err := app.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit
		if _, err := tx.Exec(ctx, `INSERT INTO approval_audit (tool_call_id, approver, approved) VALUES ($1, $2, $3)`,
			sub.ToolCallID, approver, sub.IsApproved()); err != nil {
			return err
		}
		if _, err := eng.SubmitToolResultTx(ctx, tx, "support-1", sub); err != nil {
			return err // the deferred Rollback takes the audit row back
		}
		return tx.Commit(ctx) // the run wakes now
	}
	fmt.Println("alice:", decide(ctx, "alice", helix.Approve("call-1", "receipt checked")))
	err = decide(ctx, "bob", helix.Deny("call-1", "looks odd"))
	var refused *helix.SubmissionError
	if errors.As(err, &refused) {
		fmt.Println("bob:", refused.Code)
	}

	res, err = h.Result(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Status, string(res.Output))
	var approver string
	if err := app.QueryRow(ctx, `SELECT string_agg(approver, ',') FROM approval_audit`).Scan(&approver); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("audited:", approver)
	// Output:
	// suspended_client_tool [call-1]
	// alice: <nil>
	// bob: already_answered
	// completed "Order A-17 is refunded."
	// audited: alice
}
