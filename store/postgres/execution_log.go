package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// ExecutionLog is an append-only log of model calls and tool executions in
// its own table (helix_demo.executions), written outside the engine's
// transactions: it keeps every attempt, including those a crash lost,
// which is what proves that a completed tool never runs twice (the CLI's
// demo and research agent write it). It is not part of the helix schema:
// CreateExecutionLog creates it.
type ExecutionLog struct{ q Querier }

// NewExecutionLog returns the log over q (PgxQuerier adapts a pool).
func NewExecutionLog(q Querier) *ExecutionLog { return &ExecutionLog{q: q} }

// executionLogSchema creates the log's table. Idempotent, but not safe to
// run concurrently (CREATE SCHEMA IF NOT EXISTS can race).
const executionLogSchema = `
CREATE SCHEMA IF NOT EXISTS helix_demo;
CREATE TABLE IF NOT EXISTS helix_demo.executions (
	id          bigserial   PRIMARY KEY,
	session_id  text        NOT NULL,
	kind        text        NOT NULL, -- model or tool
	name        text        NOT NULL, -- "step N" or the tool name
	step        int         NOT NULL,
	call_key    text        NOT NULL, -- the tool call's idempotency key
	pid         int         NOT NULL,
	executed_at timestamptz NOT NULL DEFAULT now()
)`

// Create creates the log's schema and table when missing. Run it from one
// process before any writer starts.
func (l *ExecutionLog) Create(ctx context.Context) error {
	_, err := l.q.Exec(ctx, executionLogSchema)
	return wrap(err, "create helix_demo.executions")
}

// Execution is one entry of the log.
type Execution struct {
	SessionID string
	// Kind is "model" or "tool"; Name "step N" or the tool's name.
	Kind, Name string
	Step       int
	// Key is the tool call's idempotency key.
	Key string
	// PID is the process that executed it.
	PID int
}

// Record appends e. Each call appends a row: a retried execution shows
// twice, which is the point.
func (l *ExecutionLog) Record(ctx context.Context, e Execution) error {
	_, err := l.q.Exec(ctx, `INSERT INTO helix_demo.executions (session_id, kind, name, step, call_key, pid)
		VALUES ($1, $2, $3, $4, $5, $6)`, e.SessionID, e.Kind, e.Name, e.Step, e.Key, e.PID)
	return wrap(err, "record %s %s", e.Kind, e.Name)
}

// Executions returns a session's entries in the order they were recorded.
func (l *ExecutionLog) Executions(ctx context.Context, sessionID string) ([]Execution, error) {
	rows, err := l.q.Query(ctx, `SELECT kind, name, call_key, step, pid FROM helix_demo.executions
		WHERE session_id = $1 ORDER BY id`, sessionID)
	if err != nil {
		return nil, wrap(err, "read the executions of %s", sessionID)
	}
	defer rows.Close()
	var out []Execution
	for rows.Next() {
		e := Execution{SessionID: sessionID}
		if err := rows.Scan(&e.Kind, &e.Name, &e.Key, &e.Step, &e.PID); err != nil {
			return nil, wrap(err, "read the executions of %s", sessionID)
		}
		out = append(out, e)
	}
	return out, wrap(rows.Err(), "read the executions of %s", sessionID)
}

// RecreateDatabase drops database name (closing its connections) and
// creates it empty, over q, a connection to another database of the same
// server: how the demo and the load test get a scratch database. Everything
// in the dropped database is lost.
func RecreateDatabase(ctx context.Context, q Querier, name string) error {
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := q.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return wrap(err, "drop database %s", name)
	}
	_, err := q.Exec(ctx, "CREATE DATABASE "+ident)
	return wrap(err, "create database %s", name)
}
