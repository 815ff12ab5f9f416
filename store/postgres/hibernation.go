package postgres

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// The store's side of hibernation (docs/engine.md, "Hibernation"): a run
// that waits for people long enough records that it waits with no workflow
// running it, and ends its workflow; any message sent to the run's
// workflow (helix.send_tool_message, which every answer and wake-up goes
// through) or its earliest deadline (WakeDue) wakes it: its next
// continuation is due (helix.wake_run), announced on RunRecordedChannel and
// started like a recorded run (ListOrphanRuns).

// HibernateRun hibernates run runID, whose workflow workflowID waits for
// the tool calls of topics, until wakeAt (Unix ms, 0 for no deadline),
// unless a message waits for the workflow on one of topics: hibernated
// reports which. It runs two statements: the first locks the run's row, so
// that a message sent meanwhile waits for this transaction's end and then
// wakes the run (helix.wake_run), and the second looks for messages in a
// snapshot taken once the lock is held. Call it in a transaction.
func HibernateRun(ctx context.Context, q Querier, runID, workflowID string, topics []string, wakeAt int64) (hibernated bool, err error) {
	var one int
	if err := q.QueryRow(ctx, `SELECT 1 FROM helix.runs WHERE run_id = $1 FOR UPDATE`, runID).Scan(&one); err != nil {
		return false, wrap(err, "lock run %s to hibernate it", runID)
	}
	var at *int64
	if wakeAt > 0 {
		at = &wakeAt
	}
	err = q.QueryRow(ctx, `UPDATE helix.runs SET hibernated_at = now(), wake_at = $2
		WHERE run_id = $1 AND NOT EXISTS (SELECT 1 FROM dbos.notifications
			WHERE destination_uuid = $3 AND topic = ANY($4::text[]) AND NOT consumed)
		RETURNING true`, runID, at, workflowID, topics).Scan(&hibernated)
	if isNoRows(err) {
		return false, nil
	}
	return hibernated, wrap(err, "hibernate run %s", runID)
}

// BeginContinuation records that continuation wake of run runID began:
// the starters' sweep no longer looks for it. Call it in the
// continuation's first transaction.
func BeginContinuation(ctx context.Context, q Querier, runID string, wake int) error {
	_, err := q.Exec(ctx, `UPDATE helix.runs SET woken_at = NULL WHERE run_id = $1 AND wakes = $2 AND woken_at IS NOT NULL`, runID, wake)
	return wrap(err, "begin continuation %d of run %s", wake, runID)
}

// WakeDue wakes the hibernated runs whose earliest deadline is at or
// before now (helix.wake_run: announced on RunRecordedChannel) and returns
// how many it woke. Several engines may run it at once: a run wakes once.
func WakeDue(ctx context.Context, q Querier, now time.Time) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT count(w.woke) FROM (SELECT helix.wake_run(workflow_id) AS woke FROM helix.runs
		WHERE hibernated_at IS NOT NULL AND wake_at IS NOT NULL AND wake_at <= $1) w`, now.UnixMilli()).Scan(&n)
	return n, wrap(err, "wake the hibernated runs whose deadline passed")
}

// ParseWakeAnnouncement parses the announcement of a woken run
// (helix.wake_run's, on RunRecordedChannel, also returned by
// helix.send_tool_message): the run whose continuation o.Wake is due. ok is
// false for any other payload (a recorded run's ID, "", or NULL's "").
func ParseWakeAnnouncement(payload string) (o OrphanRun, ok bool) {
	f := strings.Split(payload, "\t")
	if len(f) != 5 {
		return OrphanRun{}, false
	}
	n, err := strconv.Atoi(f[3])
	if err != nil || n < 1 || f[0] == "" || f[2] == "" {
		return OrphanRun{}, false
	}
	return OrphanRun{RunID: f[0], SessionID: f[1], WorkflowID: f[2], Wake: n, AgentType: f[4]}, true
}
