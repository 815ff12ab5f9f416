package postgres

import (
	"context"
	"fmt"
)

// RunRecordedChannel is the NOTIFY channel on which a run recorded in a
// caller's transaction (engine.ExecuteTx) is announced; the payload is the
// run ID. Postgres delivers a NOTIFY only when its transaction commits, so a
// listener hears of committed runs only. Every launched engine listens and
// starts the run when it registers the run's agent.
const RunRecordedChannel = "helix_run_recorded"

// NotifyRunRecorded announces runID on RunRecordedChannel, on q (a
// caller's transaction: the notification goes out at its commit, and never
// if it rolls back).
//
// A NOTIFY takes Postgres's notification queue lock at commit, which
// serializes the commits of the transactions that notified; one per
// recorded run is the price of starting it at once rather than at the next
// sweep (ListOrphanRuns).
func NotifyRunRecorded(ctx context.Context, q Querier, runID string) error {
	if _, err := q.Exec(ctx, `SELECT pg_notify($1, $2)`, RunRecordedChannel, runID); err != nil {
		return fmt.Errorf("store: announce recorded run %s: %w", runID, err)
	}
	return nil
}

// GetOrphanRun returns run runID when it is an orphan as ListOrphanRuns
// defines it (running, with a workflow ID DBOS has no workflow for), else
// false. Reads only.
func GetOrphanRun(ctx context.Context, q Querier, runID string) (OrphanRun, bool, error) {
	out, err := listOrphanRuns(ctx, q, runID)
	if err != nil || len(out) == 0 {
		return OrphanRun{}, false, wrap(err, "read recorded run %s", runID)
	}
	return out[0], true, nil
}

// WatchPayloads calls fn with each payload line of every NOTIFY on channel,
// on the LISTEN connection the store keeps for channel (shared with Watch),
// and with "" each time that connection (re)connects, the first time
// included: notifications sent while it was away are lost, so "" means
// "anything may have been missed; look again". fn runs on the listener's
// goroutine and must not block. Call stop when done.
func (s *Store) WatchPayloads(channel string, fn func(payload string)) (stop func(), err error) {
	n, err := s.watcher(channel)
	if err != nil {
		return nil, err
	}
	t := &tap{fn: fn}
	n.mu.Lock()
	if n.taps == nil {
		n.taps = map[*tap]struct{}{}
	}
	n.taps[t] = struct{}{}
	n.mu.Unlock()
	// A tap added after the connection came up has missed the first "".
	fn("")
	return func() {
		n.mu.Lock()
		delete(n.taps, t)
		n.mu.Unlock()
	}, nil
}
