package helix_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

// What sqlc generates for pgx/v5 (sql_package: pgx/v5) from
//
//	-- name: CreateRefund :one
//	INSERT INTO refunds (order_id, amount_cents, tool_call_id) VALUES ($1, $2, $3)
//	RETURNING id, order_id, amount_cents, tool_call_id;
//
// written out here so that the example is one file.

// DBTX is what the queries run on: a pool, a connection or a transaction.
type DBTX interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}

// New returns the queries on db.
func New(db DBTX) *Queries { return &Queries{db: db} }

// Queries are the app's queries.
type Queries struct{ db DBTX }

// WithTx returns the queries on tx.
func (q *Queries) WithTx(tx pgx.Tx) *Queries { return &Queries{db: tx} }

// Refund is a row of refunds.
type Refund struct {
	ID          int64
	OrderID     string
	AmountCents int32
	ToolCallID  string
}

// CreateRefundParams are the parameters of CreateRefund.
type CreateRefundParams struct {
	OrderID     string
	AmountCents int32
	ToolCallID  string
}

const createRefund = `-- name: CreateRefund :one
INSERT INTO refunds (order_id, amount_cents, tool_call_id) VALUES ($1, $2, $3)
RETURNING id, order_id, amount_cents, tool_call_id
`

// CreateRefund inserts a refund and returns its row.
func (q *Queries) CreateRefund(ctx context.Context, arg CreateRefundParams) (Refund, error) {
	row := q.db.QueryRow(ctx, createRefund, arg.OrderID, arg.AmountCents, arg.ToolCallID)
	var i Refund
	err := row.Scan(&i.ID, &i.OrderID, &i.AmountCents, &i.ToolCallID)
	return i, err
}

// A transactional tool writes the app's refunds table through sqlc's
// queries on the transaction the engine gives it (queries.WithTx(tx)): the
// refund row commits together with the durable record of the call, so a
// crash never loses it and a replay never writes it twice.
func ExampleNewTxTool() {
	ctx := context.Background()
	url := pgtest.ExampleURL()
	app, err := pgxpool.New(ctx, url) // the application's pool, on the engine's database
	if err != nil {
		fmt.Println(err)
		return
	}
	defer app.Close()
	if _, err := app.Exec(ctx, `CREATE TABLE refunds (id bigserial PRIMARY KEY, order_id text NOT NULL UNIQUE,
		amount_cents int NOT NULL, tool_call_id text NOT NULL)`); err != nil {
		fmt.Println(err)
		return
	}
	queries := New(app)

	type refundIn struct {
		OrderID     string `json:"orderId"`
		AmountCents int32  `json:"amountCents"`
	}
	refund := helix.MustNewTxTool("refund", "Refund an order",
		func(ctx context.Context, tx pgx.Tx, in refundIn, tc helix.ToolContext) (string, error) {
			r, err := queries.WithTx(tx).CreateRefund(ctx, CreateRefundParams{
				OrderID: in.OrderID, AmountCents: in.AmountCents, ToolCallID: tc.ToolCallID(),
			})
			if err != nil {
				return "", err // rolls the tool's writes back; the model sees the error
			}
			return fmt.Sprintf("refund %d recorded", r.ID), nil
		})
	support := &helix.Agent{
		Name:  "support",
		Tools: []*helix.Tool{refund},
		Model: scripted.New(
			scripted.Step{ToolCalls: []scripted.Call{{ID: "call-1", Name: "refund", Args: refundIn{OrderID: "A-17", AmountCents: 2500}}}},
			scripted.Step{Text: "Order A-17 is refunded."},
		),
	}

	eng, err := engine.New(ctx, engine.Config{DatabaseURL: url})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = eng.Shutdown(ctx) }()
	if err := eng.Register(support); err != nil {
		fmt.Println(err)
		return
	}
	if err := eng.Launch(ctx); err != nil {
		fmt.Println(err)
		return
	}
	h, err := eng.Execute(ctx, support, engine.Input{Message: "Please refund order A-17."}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := h.Result(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Status, string(res.Output))

	rows, err := app.Query(ctx, `SELECT id, order_id, amount_cents, tool_call_id FROM refunds ORDER BY id`)
	if err != nil {
		fmt.Println(err)
		return
	}
	refunds, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Refund])
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range refunds {
		fmt.Printf("refund %d: order %s, %d cents, call %s\n", r.ID, r.OrderID, r.AmountCents, r.ToolCallID)
	}
	// Output:
	// completed "Order A-17 is refunded."
	// refund 1: order A-17, 2500 cents, call call-1
}
