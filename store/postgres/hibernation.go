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
// reports which. wake numbers the execution's continuation of the run (0:
// workflowID itself). It runs two statements: the first locks the run's
// row, so that a message sent meanwhile waits for this transaction's end
// and then wakes the run (helix.wake_run), and the second looks for
// messages in a snapshot taken once the lock is held. Call it in a
// transaction.
//
// A run already asleep, woken since (its wakes past wake) or ended is
// reported hibernated, and nothing is written: the execution hibernated it
// before (a replay of a workflow whose hibernation committed but whose
// end DBOS did not record: the hibernation writes no journal record, the
// run's row is its record), or the run ended without it.
func HibernateRun(ctx context.Context, q Querier, runID, workflowID string, wake int, topics []string, wakeAt int64) (hibernated bool, err error) {
	var before bool
	if err := q.QueryRow(ctx, `SELECT hibernated_at IS NOT NULL OR wakes > $2 OR status IN ('completed', 'failed', 'interrupted')
		FROM helix.runs WHERE run_id = $1 FOR UPDATE`, runID, wake).Scan(&before); err != nil {
		return false, wrap(err, "lock run %s to hibernate it", runID)
	}
	if before {
		return true, nil
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

// HibernateForChildren hibernates run runID, whose step waits for the
// sub-agent runs of the sessions asleep (hibernated, or woken with a
// continuation of their own): the end of any of them wakes it (the
// trigger on a run's status, helix.notify_run_status). When one of them
// ended already, the run is woken at once instead, so that its next
// continuation takes the child's result: woken reports that. Either way
// the run's workflow ends. record writes the step and the children it
// waits for on the session's row. The lock order is the children's runs
// (FOR SHARE), the session's row, then the run's: a child whose end
// commits meanwhile either waits for this transaction and then wakes the
// run, or is seen ended here. Call it in a transaction.
func HibernateForChildren(ctx context.Context, q Querier, runID string, asleep []string, record func() error) (woken bool, err error) {
	var live int
	if err := q.QueryRow(ctx, `SELECT count(DISTINCT session_id) FROM (SELECT session_id FROM helix.runs
		WHERE session_id = ANY($1::text[]) AND status NOT IN ('completed', 'failed', 'interrupted') FOR SHARE) r`,
		asleep).Scan(&live); err != nil {
		return false, wrap(err, "lock the sub-agent runs run %s waits for", runID)
	}
	if err := record(); err != nil {
		return false, err
	}
	var wf string
	err = q.QueryRow(ctx, `UPDATE helix.runs SET hibernated_at = now(), wake_at = NULL WHERE run_id = $1 AND hibernated_at IS NULL
		RETURNING workflow_id`, runID).Scan(&wf)
	if woken = live < len(asleep); err == nil && woken {
		// A child ended meanwhile: wake the run at once, as its end would.
		_, err = q.Exec(ctx, `SELECT helix.wake_run($1)`, wf)
	}
	return woken, wrap(err, "hibernate run %s for its sub-agents", runID)
}

// BeginContinuation records that continuation wake of run runID began:
// the starters' sweep no longer looks for it. Call it in the
// continuation's first transaction. The write is held for q's next
// statement when q is a [Deferrer] (the journal's transaction: its commit).
func BeginContinuation(ctx context.Context, q Querier, runID string, wake int) error {
	err := execLater(ctx, q, `UPDATE helix.runs SET woken_at = NULL WHERE run_id = $1 AND wakes = $2 AND woken_at IS NOT NULL`, runID, wake)
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

// LastSegment returns the number of the last segment (1, 2, …) of the
// queued run whose driver's workflow is driverID, 0 when it has none: where
// a hibernated driver stopped (its last segment's outcome names the call it
// waits for). Reads only.
func LastSegment(ctx context.Context, q Querier, driverID string) (int, error) {
	var k int
	err := q.QueryRow(ctx, `SELECT coalesce(max(substr(workflow_uuid, length($1 || '`+SegmentInfix+`') + 1)::integer), 0)
		FROM dbos.workflow_status WHERE `+segmentOf("", "$1"), driverID).Scan(&k)
	return k, wrap(err, "read the last segment of workflow %s", driverID)
}

// ParseWakeAnnouncement parses the announcement of a woken run
// (helix.wake_run's, on RunRecordedChannel, also returned by
// helix.send_tool_message): the run whose continuation o.Wake is due, with
// its agent and a queued run's admission. ok is false for any other
// payload (a recorded run's ID, "", or NULL's "").
func ParseWakeAnnouncement(payload string) (o OrphanRun, ok bool) {
	f := strings.Split(payload, "\t")
	if len(f) != 8 {
		return OrphanRun{}, false
	}
	n, err := strconv.Atoi(f[3])
	if err != nil || n < 1 || f[0] == "" || f[2] == "" {
		return OrphanRun{}, false
	}
	priority, err := strconv.Atoi(f[7])
	if err != nil {
		return OrphanRun{}, false
	}
	return OrphanRun{RunID: f[0], SessionID: f[1], WorkflowID: f[2], Wake: n, AgentType: f[4],
		Queue: f[5], PartitionKey: f[6], Priority: priority}, true
}
