package postgres

import (
	"context"
)

// The statements that wake runs waiting for an answer, and that send and
// take the answers, in DBOS's message table (dbos.notifications). DBOS's
// notifications trigger sends a NOTIFY per message, which wakes the
// waiting run; the wake-up sweep re-sends those a run may have missed.

// WakeSweep is what ResendWakeups re-sends, and to whom.
type WakeSweep struct {
	// Channel is the NOTIFY channel DBOS's listener listens on, and
	// TopicPrefix the prefix of the tool-call topics (recv's).
	Channel, TopicPrefix string
	// ExecutorID is the executor whose pending workflows are woken.
	ExecutorID string
	// AnsweredBeforeMS: answers older than this (Unix ms on the engine's
	// clock, which stamped them) are re-sent.
	AnsweredBeforeMS int64
	// SegmentTopicPrefix is the prefix of the topics on which segments
	// report to their drivers; SegmentsBeforeMS (Unix ms, real time: DBOS
	// stamps it) ends the minute in which a segment's end is re-sent.
	SegmentTopicPrefix string
	SegmentsBeforeMS   int64
}

// ResendWakeups notifies, once per call, the waits of the sweep's
// executor's pending workflows that have an unconsumed answer older than
// AnsweredBeforeMS, or whose session has an interrupt request; and the
// drivers of queued runs (of that executor) whose segment ended in the
// minute before SegmentsBeforeMS and whose outcome message is not taken
// (older ones find it at their next check). The wait re-reads its
// messages when woken, so an extra wake-up is harmless. It returns how
// many it sent.
//
// The sweep starts from the executor's pending workflows (DBOS's partial
// index of pending workflows), then their runs and sessions: its cost
// follows the runs this executor holds live, not the sessions that wait
// (a hibernated run has no pending workflow; a sweep over every session
// with a suspended step read 88,000 hibernated ones, 0.68 s, every second).
func ResendWakeups(ctx context.Context, q Querier, w WakeSweep) (int, error) {
	var n int
	err := q.QueryRow(ctx, wakeSweepSQL, w.Channel, w.TopicPrefix, w.AnsweredBeforeMS, w.ExecutorID, w.SegmentTopicPrefix,
		w.SegmentsBeforeMS).Scan(&n)
	return n, err
}

const wakeSweepSQL = `
SELECT count(pg_notify($1, w.payload)) FROM (
	SELECT DISTINCT ws.workflow_uuid || '::' || $2 || p.key AS payload
	FROM dbos.workflow_status ws
	JOIN helix.runs r ON r.workflow_id = ws.workflow_uuid
	JOIN helix.sessions s ON s.session_id = r.session_id
	CROSS JOIN LATERAL jsonb_each(s.pending_client_tool_calls) AS p(key, val)
	WHERE ws.status = 'PENDING' AND ws.executor_id = $4
	  AND s.pending_client_tool_calls <> '{}'::jsonb
	  AND p.val->>'workflowId' = ws.workflow_uuid
	  AND ((p.val ? 'submission' AND NOT p.val ? 'consumedAt' AND (p.val->>'submittedAt')::bigint < $3)
	       OR s.interrupt_requested)
	UNION
	SELECT n.destination_uuid || '::' || n.topic
	FROM dbos.workflow_status seg
	JOIN dbos.workflow_status d ON d.workflow_uuid = seg.parent_workflow_id
	JOIN dbos.notifications n ON n.destination_uuid = d.workflow_uuid AND starts_with(n.topic, $5)
	WHERE seg.completed_at BETWEEN $6::bigint - 60000 AND $6::bigint AND seg.queue_name IS NOT NULL
	  AND d.status = 'PENDING' AND d.executor_id = $4 AND NOT n.consumed
) w`

// ConsumeMessageStatement returns the statement that takes the oldest
// untaken message on topic for workflowID, as DBOS's Recv does (stepID,
// in consumed_by_function_id, names the step that took it). Its one row,
// true, says there was one; no row, that there was none. For a caller
// that runs it in its own transaction (with the other statements of a
// step, whose outcome the message decides): taken at most once, and only
// if that transaction commits.
func ConsumeMessageStatement(workflowID, topic string, stepID int) (sql string, args []any) {
	return consumeMessageSQL, []any{workflowID, topic, stepID}
}

const consumeMessageSQL = `WITH oldest AS (
	SELECT message_uuid FROM dbos.notifications
	WHERE destination_uuid = $1 AND topic = $2 AND NOT consumed
	ORDER BY created_at_epoch_ms LIMIT 1
	FOR UPDATE
)
UPDATE dbos.notifications n SET consumed = true, consumed_by_function_id = $3
FROM oldest o WHERE n.message_uuid = o.message_uuid
RETURNING true`

// AnnounceAfterCommitSQL makes the rest of a transaction leave its
// notifications (the status of the runs it changes, their wakes from
// hibernation, its stream writes: helix.announce) to its caller, who sends
// them after the COMMIT with [AnnouncePendingSQL], in the same round trip.
// Postgres takes its notification queue lock at the commit of a
// transaction that notifies and holds it until the commit record is
// flushed, so the commits of every notifying transaction wait for each
// other's disk flush; a transaction that only notifies writes nothing to
// flush.
const AnnounceAfterCommitSQL = "SET LOCAL helix.announce_after_commit = on"

// AnnouncePendingSQL sends the notifications that the connection's
// committed transactions left to their caller ([AnnounceAfterCommitSQL];
// helix.announce_pending). It goes after the COMMIT
// ([Pipelined.AfterCommit], [SendCommit]); notifications are hints, and
// what a lost one announced is found by the engines' sweeps and the
// readers' polls.
const AnnouncePendingSQL = "SELECT helix.announce_pending()"

// SendMessageStatement returns the statement that sends a message to
// workflowID on topic, as DBOS's Send does (helix.send_tool_message):
// payload is the message in DBOS's serialization (base64 of its JSON), and
// key its idempotency key: one message per key, and DBOS's trigger wakes
// the waiting run. For a caller that sends it with the other statements of
// its transaction, so the message commits with them. A workflow cancelled
// with DBOS's tools gets nothing: the statement fails with SQLSTATE HX410.
//
// A hibernated run that is not queued gets no message, only its wake
// (helix.wake_run): its continuation reads the answer from the session's
// pending call. The statement returns the wake's announcement (NULL when
// it woke none). With announceWake the announcement goes out at the
// transaction's commit; without, the caller announces it once the
// transaction committed ([Store.Announce] on [RunRecordedChannel]), so
// that the transaction does not notify: the commits of transactions that
// notify wait for each other on Postgres's notification lock.
func SendMessageStatement(workflowID, topic, payload, key string, announceWake bool) (sql string, args []any) {
	return `SELECT helix.send_tool_message($1, $2, $3, $4, $5)`, []any{workflowID, topic, payload, key, announceWake}
}
