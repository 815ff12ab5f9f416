-- The application's queries (sqlc's query input); queries.go is what
-- `sqlc generate` makes of them with sql_package: pgx/v5.

-- name: CreateTicket :one
INSERT INTO public.tickets (order_id, body) VALUES ($1, $2)
RETURNING id, order_id, body, session_id;

-- name: GetTicketBySession :one
SELECT id, order_id, body, session_id FROM public.tickets WHERE session_id = $1;

-- name: CreateRefund :one
INSERT INTO public.refunds (ticket_id, order_id, amount_cents, tool_call_id) VALUES ($1, $2, $3, $4)
RETURNING id, ticket_id, order_id, amount_cents, tool_call_id;

-- name: CreateAuditEntry :exec
INSERT INTO public.refund_audit (ticket_id, tool_call_id, approver, approved, reason) VALUES ($1, $2, $3, $4, $5);

-- name: ListRefunds :many
SELECT id, ticket_id, order_id, amount_cents, tool_call_id FROM public.refunds WHERE ticket_id = $1 ORDER BY id;

-- name: ListAuditEntries :many
SELECT id, ticket_id, tool_call_id, approver, approved, reason FROM public.refund_audit WHERE ticket_id = $1 ORDER BY id;
