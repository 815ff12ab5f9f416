package main

// This file is what `sqlc generate` writes (db.go, models.go and
// queries.sql.go, here in one file) from schema.sql and queries.sql with
// sql_package: pgx/v5, written out so that the example builds without sqlc.
// The part that matters for helix is WithTx: the queries run on any pgx.Tx,
// such as the one a transactional tool receives, or the app's own
// transaction passed to ExecuteTx and SubmitToolResultTx.

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what the queries run on: a pool, a connection or a transaction.
type DBTX interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}

// New returns the queries on db.
func New(db DBTX) *Queries {
	return &Queries{db: db}
}

// Queries are the application's queries.
type Queries struct {
	db DBTX
}

// WithTx returns the queries on tx.
func (q *Queries) WithTx(tx pgx.Tx) *Queries {
	return &Queries{
		db: tx,
	}
}

// Ticket is a row of tickets.
type Ticket struct {
	ID        int64
	OrderID   string
	Body      string
	SessionID string
}

// Refund is a row of refunds.
type Refund struct {
	ID          int64
	TicketID    int64
	OrderID     string
	AmountCents int32
	ToolCallID  string
}

// RefundAudit is a row of refund_audit.
type RefundAudit struct {
	ID         int64
	TicketID   int64
	ToolCallID string
	Approver   string
	Approved   bool
	Reason     string
}

const createTicket = `-- name: CreateTicket :one
INSERT INTO public.tickets (order_id, body) VALUES ($1, $2)
RETURNING id, order_id, body, session_id
`

// CreateTicketParams are the parameters of CreateTicket.
type CreateTicketParams struct {
	OrderID string
	Body    string
}

// CreateTicket inserts a ticket and returns its row.
func (q *Queries) CreateTicket(ctx context.Context, arg CreateTicketParams) (Ticket, error) {
	row := q.db.QueryRow(ctx, createTicket, arg.OrderID, arg.Body)
	var i Ticket
	err := row.Scan(&i.ID, &i.OrderID, &i.Body, &i.SessionID)
	return i, err
}

const getTicketBySession = `-- name: GetTicketBySession :one
SELECT id, order_id, body, session_id FROM public.tickets WHERE session_id = $1
`

// GetTicketBySession returns the ticket a session works on.
func (q *Queries) GetTicketBySession(ctx context.Context, sessionID string) (Ticket, error) {
	row := q.db.QueryRow(ctx, getTicketBySession, sessionID)
	var i Ticket
	err := row.Scan(&i.ID, &i.OrderID, &i.Body, &i.SessionID)
	return i, err
}

const createRefund = `-- name: CreateRefund :one
INSERT INTO public.refunds (ticket_id, order_id, amount_cents, tool_call_id) VALUES ($1, $2, $3, $4)
RETURNING id, ticket_id, order_id, amount_cents, tool_call_id
`

// CreateRefundParams are the parameters of CreateRefund.
type CreateRefundParams struct {
	TicketID    int64
	OrderID     string
	AmountCents int32
	ToolCallID  string
}

// CreateRefund inserts a refund and returns its row.
func (q *Queries) CreateRefund(ctx context.Context, arg CreateRefundParams) (Refund, error) {
	row := q.db.QueryRow(ctx, createRefund, arg.TicketID, arg.OrderID, arg.AmountCents, arg.ToolCallID)
	var i Refund
	err := row.Scan(&i.ID, &i.TicketID, &i.OrderID, &i.AmountCents, &i.ToolCallID)
	return i, err
}

const createAuditEntry = `-- name: CreateAuditEntry :exec
INSERT INTO public.refund_audit (ticket_id, tool_call_id, approver, approved, reason) VALUES ($1, $2, $3, $4, $5)
`

// CreateAuditEntryParams are the parameters of CreateAuditEntry.
type CreateAuditEntryParams struct {
	TicketID   int64
	ToolCallID string
	Approver   string
	Approved   bool
	Reason     string
}

// CreateAuditEntry records a decision on a refund.
func (q *Queries) CreateAuditEntry(ctx context.Context, arg CreateAuditEntryParams) error {
	_, err := q.db.Exec(ctx, createAuditEntry, arg.TicketID, arg.ToolCallID, arg.Approver, arg.Approved, arg.Reason)
	return err
}

const listRefunds = `-- name: ListRefunds :many
SELECT id, ticket_id, order_id, amount_cents, tool_call_id FROM public.refunds WHERE ticket_id = $1 ORDER BY id
`

// ListRefunds returns a ticket's refunds.
func (q *Queries) ListRefunds(ctx context.Context, ticketID int64) ([]Refund, error) {
	rows, err := q.db.Query(ctx, listRefunds, ticketID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var items []Refund
	for rows.Next() {
		var i Refund
		if err := rows.Scan(&i.ID, &i.TicketID, &i.OrderID, &i.AmountCents, &i.ToolCallID); err != nil {
			return nil, err
		}
		items = append(items, i)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return items, nil
}

const listAuditEntries = `-- name: ListAuditEntries :many
SELECT id, ticket_id, tool_call_id, approver, approved, reason FROM public.refund_audit WHERE ticket_id = $1 ORDER BY id
`

// ListAuditEntries returns the decisions on a ticket's refunds.
func (q *Queries) ListAuditEntries(ctx context.Context, ticketID int64) ([]RefundAudit, error) {
	rows, err := q.db.Query(ctx, listAuditEntries, ticketID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var items []RefundAudit
	for rows.Next() {
		var i RefundAudit
		if err := rows.Scan(&i.ID, &i.TicketID, &i.ToolCallID, &i.Approver, &i.Approved, &i.Reason); err != nil {
			return nil, err
		}
		items = append(items, i)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return items, nil
}
