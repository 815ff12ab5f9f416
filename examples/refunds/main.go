// Command refunds shows an application's data and its agents' state
// changing together, in one transaction each time, on an orders and
// refunds schema:
//
//  1. A support ticket is opened together with the session of the agent
//     that triages it (Engine.ExecuteTx): both rows commit, or neither does.
//  2. The agent refunds the order with a transactional tool
//     (helix.NewTxTool) that writes the refund through sqlc's queries on the
//     tool's transaction (Queries.WithTx): the refund row commits with the
//     durable record of the call, so it is written once whatever crashes.
//     The tool is gated by helix.RequireApproval.
//  3. A person's approval is written with the app's audit row
//     (Engine.SubmitToolResultTx): the agent wakes when both commit. A
//     second click on the same approval is refused, and its audit row rolls
//     back with it.
//  4. The ticket's refunds and audit rows are printed: each once.
//
// A scripted model plays the agent's answers, so no API key is needed:
//
//	HELIX_DATABASE_URL=postgres://... go run ./examples/refunds
//
// The program creates its tables (schema.sql) if they are missing and opens
// a new ticket on each run. queries.go is what sqlc generates from
// schema.sql and queries.sql.
package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

//go:embed schema.sql
var schema string

// refundIn is the refund tool's input, as the model writes it.
type refundIn struct {
	OrderID     string `json:"orderId" jsonschema:"description=The order to refund, e.g. A-17"`
	AmountCents int32  `json:"amountCents" jsonschema:"minimum=1"`
}

// newRefundTool returns the transactional refund tool. Its function runs
// in a transaction the engine commits with the call's record: only
// database work inside (see helix.NewTxTool), here a read of the ticket
// and the insert of the refund, both through the app's sqlc queries.
func newRefundTool(queries *Queries) *helix.Tool {
	return helix.MustNewTxTool("refund", "Refund the order of the ticket",
		func(ctx context.Context, tx pgx.Tx, in refundIn, tc helix.ToolContext) (string, error) {
			q := queries.WithTx(tx)
			ticket, err := q.GetTicketBySession(ctx, tc.SessionID())
			if err != nil {
				return "", fmt.Errorf("find the ticket of session %s: %w", tc.SessionID(), err)
			}
			if ticket.OrderID != in.OrderID {
				return "", fmt.Errorf("ticket %d is about order %s, not %s", ticket.ID, ticket.OrderID, in.OrderID)
			}
			r, err := q.CreateRefund(ctx, CreateRefundParams{
				TicketID: ticket.ID, OrderID: in.OrderID, AmountCents: in.AmountCents, ToolCallID: tc.ToolCallID(),
			})
			if err != nil {
				return "", err // rolls back the tool's writes; the model sees the error
			}
			return fmt.Sprintf("refund %d of %d cents on order %s", r.ID, r.AmountCents, r.OrderID), nil
		}, helix.RequireApproval())
}

// newTriageAgent returns the agent that triages a ticket, with a scripted
// model in place of an LLM.
func newTriageAgent(queries *Queries) *helix.Agent {
	return &helix.Agent{
		Name:         "triage",
		SystemPrompt: "You triage support tickets. Refund damaged orders with the refund tool.",
		Tools:        []*helix.Tool{newRefundTool(queries)},
		Model: scripted.New(
			scripted.Step{Text: "The order arrived damaged: refunding it.", ToolCalls: []scripted.Call{
				{ID: "call-1", Name: "refund", Args: refundIn{OrderID: "A-17", AmountCents: 2500}},
			}},
			scripted.Step{Text: "Order A-17 is refunded: 25.00 will be back on your card in a few days."},
		),
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	url := os.Getenv("HELIX_DATABASE_URL")
	if url == "" {
		log.Fatal("set HELIX_DATABASE_URL to a Postgres URL")
	}
	if err := run(ctx, url, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run opens a ticket, lets its agent ask for a refund, approves it, and
// prints the ticket's rows to out.
func run(ctx context.Context, url string, out io.Writer) (err error) {
	// The app's pool, on the engine's database: the app's tables and helix's
	// live side by side, which is what lets one transaction hold both.
	app, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer app.Close()
	if _, err := app.Exec(ctx, schema); err != nil {
		return fmt.Errorf("create the app's tables: %w", err)
	}
	queries := New(app)

	triage := newTriageAgent(queries)
	eng, err := engine.New(ctx, engine.Config{DatabaseURL: url})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, eng.Shutdown(context.WithoutCancel(ctx))) }()
	if err := eng.Register(triage); err != nil {
		return err
	}
	if err := eng.Launch(ctx); err != nil {
		return err
	}

	// 1. The ticket and its triage session, in one transaction.
	var ticket Ticket
	var pending *engine.PendingRun
	err = pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		var err error
		ticket, err = queries.WithTx(tx).CreateTicket(ctx, CreateTicketParams{
			OrderID: "A-17", Body: "My order A-17 arrived broken. Can I get my money back?",
		})
		if err != nil {
			return err
		}
		pending, err = eng.ExecuteTx(ctx, tx, triage, engine.Input{Message: ticket.Body},
			&engine.ExecuteOptions{SessionID: ticket.SessionID})
		return err // an error rolls back the ticket and the session together
	})
	if err != nil {
		return fmt.Errorf("open a ticket: %w", err)
	}
	fmt.Fprintf(out, "ticket %d opened for order %s, triaged by session %s\n", ticket.ID, ticket.OrderID, ticket.SessionID)

	// 2. The run starts after the commit, and suspends on the refund's
	// approval.
	h, err := pending.Handle(ctx, eng)
	if err != nil {
		return err
	}
	res, err := h.Result(ctx)
	if err != nil {
		return err
	}
	calls, err := eng.PendingToolCalls(ctx, ticket.SessionID)
	if err != nil {
		return err
	}
	if res.Status != helix.AgentSuspendedClientTool || len(calls) != 1 {
		return fmt.Errorf("the agent did not wait for one approval: %s, %d pending calls (%s)", res.Status, len(calls), res.Error)
	}
	call := calls[0]
	fmt.Fprintf(out, "agent: %s, waiting for the approval of %s %s (%s)\n", res.Status, call.ToolName, call.Arguments, call.ToolCallID)

	// 3. The approval, with the app's audit row, in one transaction; then
	// the same approval again, as a double click would send it.
	approve := helix.Approve(call.ToolCallID, "photo of the damage checked")
	for range 2 {
		err := decide(ctx, app, eng, queries, ticket, "alice", approve)
		var refused *helix.SubmissionError
		switch {
		case err == nil:
			fmt.Fprintln(out, "alice approves: the approval and its audit row committed")
		case errors.As(err, &refused):
			fmt.Fprintf(out, "alice approves again: refused (%s), the audit row rolled back\n", refused.Code)
		default:
			return err
		}
	}
	res, err = h.Result(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "agent: %s %s\n", res.Status, res.Output)

	// 4. The ticket's rows.
	refunds, err := queries.ListRefunds(ctx, ticket.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "refunds of ticket %d:\n", ticket.ID)
	for _, r := range refunds {
		fmt.Fprintf(out, "  order %s, %d cents, by call %s\n", r.OrderID, r.AmountCents, r.ToolCallID)
	}
	audit, err := queries.ListAuditEntries(ctx, ticket.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "audit of ticket %d:\n", ticket.ID)
	for _, a := range audit {
		fmt.Fprintf(out, "  call %s approved=%t by %s: %s\n", a.ToolCallID, a.Approved, a.Approver, a.Reason)
	}
	return nil
}

// decide is the handler of an approver's decision: the audit row and the
// answer to the waiting agent commit together, or neither does. The
// engine's refusal (a *helix.SubmissionError, such as an answer to a call
// already answered) leaves tx usable; returning it rolls the audit row
// back.
func decide(ctx context.Context, app *pgxpool.Pool, eng *engine.Engine, queries *Queries, ticket Ticket, approver string, sub helix.ToolSubmission) error {
	return pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		if err := queries.WithTx(tx).CreateAuditEntry(ctx, CreateAuditEntryParams{
			TicketID: ticket.ID, ToolCallID: sub.ToolCallID, Approver: approver, Approved: sub.IsApproved(), Reason: sub.Reason,
		}); err != nil {
			return err
		}
		// Last in tx: it locks the conversation until the commit, when the
		// agent wakes.
		_, err := eng.SubmitToolResultTx(ctx, tx, ticket.SessionID, sub)
		return err
	})
}
