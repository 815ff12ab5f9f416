// Package recv is the durable human-in-the-loop primitive: a run waiting for
// the answer to a tool call blocks in DBOS Recv on the call's topic, and a
// submission (or a wake-up) reaches it through DBOS Send. The package owns
// the topic names, the message encoding, idempotency keys and deadline
// handling, so the engine and the workflows agree on them.
//
// A wait is durable: a message sent while no process runs the workflow
// waits in Postgres until one does, and the deadline is part of the waiting
// call's record. Send runs inside the caller's transaction, so a
// submission's durable record and its message commit together, once.
//
// The agent loop waits without DBOS's Recv: it watches the NOTIFY that
// DBOS's notifications trigger sends for the call's topic (WakePayload;
// the store's PeekAnswer tells whether a message is there), and takes the
// message with Consume inside
// the journal transaction that resolves the call, so the message is taken
// exactly when the call's outcome is recorded. A queued run's driver, which
// has no journal, waits with Wait and Take (DBOS Recv).
//
// Import rule: helix, DBOS and the store's statements (store/postgres:
// the SQL of DBOS's message table lives there), plus pgx for the caller's
// transaction.
package recv

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// TopicPrefix prefixes every tool-call topic: "helix.tool_call:<toolCallId>".
// A durable identity: changing it strands waiting runs.
const TopicPrefix = "helix.tool_call:"

// NameClock is the step that reads the clock before a wait with a deadline.
const NameClock = "helix.recv_clock"

// Forever is the timeout of a wait without a deadline (DBOS needs one).
const Forever = 100 * 365 * 24 * time.Hour

// Message kinds.
const (
	// KindSubmission carries the answer to the call.
	KindSubmission = "submission"
	// KindWake asks the waiting run to look at its session (an interrupt
	// was requested) without answering the call.
	KindWake = "wake"
)

// Message is what a waiting run receives on a call's topic.
type Message struct {
	Kind       string                `json:"kind"`
	Submission *helix.ToolSubmission `json:"submission,omitempty"`
	// SubmittedAt is the Unix ms of the submission's durable record.
	SubmittedAt int64 `json:"submittedAt,omitempty"`
}

// NotifyChannel is the Postgres NOTIFY channel on which DBOS wakes a
// workflow waiting in Recv; a notification's payload is WakePayload. It
// mirrors DBOS Transact's notifications trigger (dbos.notifications).
const NotifyChannel = "dbos_notifications_channel"

// WakePayload is the payload that wakes the workflow waiting for a tool
// call: DBOS's "<destination workflow ID>::<topic>". The waiting run then
// re-reads its messages, so a spurious wake is harmless.
func WakePayload(workflowID, toolCallID string) string {
	return workflowID + "::" + Topic(toolCallID)
}

// Topic returns the topic of a tool call.
func Topic(toolCallID string) string { return TopicPrefix + toolCallID }

// SubmissionKey is the idempotency key of a call's submission message: DBOS
// inserts one message per key and destination, whatever the retries.
func SubmissionKey(toolCallID string) string { return "helix.submission:" + toolCallID }

// WakeKey is the idempotency key of a wake-up for a call; nonce tells apart
// separate requests.
func WakeKey(toolCallID, nonce string) string { return "helix.wake:" + toolCallID + ":" + nonce }

// Wait blocks the workflow until a message arrives on the call's topic or,
// with deadlineAt (Unix ms, 0 for none), the deadline passes; timedOut
// reports the latter. Call it from a workflow body, never from a step. A
// message already waiting is returned at once, even past the deadline.
//
// The deadline is measured in real time (time.Now, then DBOS's durable
// Recv timeout, which nothing but a message can cut short): a queued run's
// driver cannot follow a clock that a test moves forward, so the engine
// refuses a Config.Clock together with a Config.Queue.
func Wait(ctx dbos.Context, toolCallID string, deadlineAt int64) (msg Message, timedOut bool, err error) {
	timeout := Forever
	if deadlineAt > 0 {
		now, err := dbos.RunAsStep(ctx, func(context.Context) (int64, error) { return time.Now().UnixMilli(), nil },
			dbos.WithStepName(NameClock))
		if err != nil {
			return Message{}, false, err
		}
		timeout = max(time.Duration(deadlineAt-now)*time.Millisecond, time.Millisecond)
	}
	msg, err = dbos.Recv[Message](ctx, Topic(toolCallID), timeout)
	if errors.Is(err, dbos.ErrTimeout) {
		return Message{}, true, nil
	}
	if err != nil {
		return Message{}, false, fmt.Errorf("recv: wait for tool call %s: %w", toolCallID, err)
	}
	return msg, false, nil
}

// Row is what a query for one row returns.
type Row interface{ Scan(dest ...any) error }

// Querier runs a query for one row (a pool, a pgx or a DBOS transaction,
// through an adapter).
type Querier[R Row] interface {
	QueryRow(ctx context.Context, sql string, args ...any) R
}

// Consume takes the oldest untaken message for the call in q's
// transaction, recording stepID as the step that took it; ok reports
// whether there was one.
func Consume[R Row](ctx context.Context, q Querier[R], workflowID, toolCallID string, stepID int) (ok bool, err error) {
	sql, args := ConsumeStatement(workflowID, toolCallID, stepID)
	err = q.QueryRow(ctx, sql, args...).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("recv: take the message of tool call %s: %w", toolCallID, err)
	}
	return true, nil
}

// CodeCancelled is the SQLSTATE of a message refused because its
// destination workflow was cancelled with DBOS's tools (SendStatement).
const CodeCancelled = "HX410"

// SendStatement returns the statement that sends m to the workflow waiting
// for the call, for a caller that sends it with the other statements of its
// transaction (a submission: the message then commits with its record, in
// the same round trip as the COMMIT). It writes what Send writes, in DBOS's
// format (helix.send_tool_message): DBOS's default JSON
// serialization, one message per key and destination, and DBOS's trigger
// wakes the waiting run. A workflow cancelled with DBOS's tools gets
// nothing: the statement fails with [CodeCancelled] ([Cancelled]).
//
// With announceWake the wake of a hibernated run is announced at the
// transaction's commit; without, the caller announces the statement's
// result after the commit (postgres.SendMessageStatement).
func SendStatement(workflowID, toolCallID string, m Message, key string, announceWake bool) (sql string, args []any, err error) {
	raw, err := json.Marshal(m)
	if err != nil {
		return "", nil, fmt.Errorf("recv: encode the message for tool call %s: %w", toolCallID, err)
	}
	sql, args = postgres.SendMessageStatement(workflowID, Topic(toolCallID), base64.StdEncoding.EncodeToString(raw), postgres.MessageKey(key, workflowID), announceWake)
	return sql, args, nil
}

// AnswerMessage returns the message that carries sub to the run waiting
// for its call, for postgres.Store.SubmitAnswer, which records the answer
// and sends it in one statement: what SendStatement sends for a
// submission recorded at submittedAt (Unix ms).
func AnswerMessage(sub helix.ToolSubmission) func(submittedAt int64) (postgres.Message, error) {
	return func(submittedAt int64) (postgres.Message, error) {
		raw, err := json.Marshal(Message{Kind: KindSubmission, Submission: &sub, SubmittedAt: submittedAt})
		if err != nil {
			return postgres.Message{}, fmt.Errorf("recv: encode the message for tool call %s: %w", sub.ToolCallID, err)
		}
		return postgres.Message{Topic: Topic(sub.ToolCallID), Payload: base64.StdEncoding.EncodeToString(raw),
			Key: SubmissionKey(sub.ToolCallID)}, nil
	}
}

// Cancelled reports a SendStatement refused because the destination
// workflow was cancelled.
func Cancelled(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == CodeCancelled
}

// ConsumeStatement returns Consume's statement, for a caller that sends it
// with others (its result, whether there was a message, is then not read).
func ConsumeStatement(workflowID, toolCallID string, stepID int) (sql string, args []any) {
	return postgres.ConsumeMessageStatement(workflowID, Topic(toolCallID), stepID)
}

// Take takes a message already waiting on the call's topic, without
// waiting for one (it waits a millisecond); ok reports whether there was
// one. Call it from a workflow body, never from a step.
func Take(ctx dbos.Context, toolCallID string) (ok bool, err error) {
	_, err = dbos.Recv[Message](ctx, Topic(toolCallID), time.Millisecond)
	switch {
	case errors.Is(err, dbos.ErrTimeout):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("recv: take the message of tool call %s: %w", toolCallID, err)
	}
	return true, nil
}

// Send delivers m to the workflow waiting for the call, exactly once per
// key. With tx (a pgx.Tx on the DBOS system database) the message commits
// with the caller's transaction; nil sends on its own. ctx is a launched
// DBOS context or a DBOS client; call it outside workflows.
func Send(ctx dbos.Client, tx any, workflowID, toolCallID string, m Message, key string) error {
	opts := []dbos.SendOption{dbos.WithIdempotencyKey(key)}
	if tx != nil {
		opts = append(opts, dbos.WithSendTransaction(tx))
	}
	if err := dbos.Send(ctx, workflowID, m, Topic(toolCallID), opts...); err != nil {
		return fmt.Errorf("recv: send to workflow %s for tool call %s: %w", workflowID, toolCallID, err)
	}
	return nil
}
