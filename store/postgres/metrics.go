package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/helix-agents/helix-dbos/store"
)

// The queries of ReadDatabaseStats. The pending calls are read from the
// sessions that have some (the JSON of store.PendingClientToolCall: an
// answered call has "submission", a timed-out one "timedOutAt"), in a scan
// of the table like the counts by status: no index of helix.sessions names
// a column a suspension writes, so that its update stays heap-only.
const (
	statsRunsSQL     = `SELECT status, count(*) FROM helix.runs GROUP BY status`
	statsSessionsSQL = `SELECT status, count(*) FROM helix.sessions GROUP BY status`
	statsStepsSQL    = `SELECT count(*) FROM helix.checkpoints`
	statsUsageSQL    = `SELECT source_type, success, count(*), COALESCE(sum(value), 0) FROM helix.usage_records
		WHERE source_type IN ('model', 'tool', 'subagent', 'client_tool_wait_ms') GROUP BY source_type, success`
	statsPendingSQL = `SELECT COALESCE(p.value->>'kind', ''), count(*)
		FROM helix.sessions s, jsonb_each(s.pending_client_tool_calls) p
		WHERE s.pending_client_tool_calls <> '{}'::jsonb AND NOT (p.value ? 'submission') AND NOT (p.value ? 'timedOutAt')
		GROUP BY 1`
	// The queues, from DBOS's workflow_status (its in-flight index and its
	// (queue_name, status, started_at) index).
	statsQueuesSQL = `SELECT queue_name, count(*) FILTER (WHERE status = 'ENQUEUED'), count(*) FILTER (WHERE status = 'PENDING'),
		coalesce((extract(epoch FROM now()) * 1000 - min(created_at) FILTER (WHERE status = 'ENQUEUED')) / 1000.0, 0)::float8
		FROM dbos.workflow_status WHERE status IN ('ENQUEUED', 'PENDING') AND queue_name IS NOT NULL GROUP BY queue_name`
	statsQueueStartsSQL = `SELECT queue_name, count(*), coalesce(avg(started_at_epoch_ms - created_at) / 1000.0, 0)::float8
		FROM dbos.workflow_status WHERE queue_name IS NOT NULL AND status IN ('PENDING', 'SUCCESS', 'ERROR', 'CANCELLED')
		AND started_at_epoch_ms > extract(epoch FROM now()) * 1000 - 60000 GROUP BY queue_name`
)

// ReadDatabaseStats reads the figures of the whole database that
// monitoring exports, in one round trip (a batch of seven queries). Its
// cost grows with the tables it counts: callers cache it (package server
// reads it at most once per DatabaseMetricsMaxAge). Reads only.
func (s *Store) ReadDatabaseStats(ctx context.Context) (*store.DatabaseStats, error) {
	out := &store.DatabaseStats{Runs: map[string]int64{}, Sessions: map[string]int64{}, PendingCalls: map[string]int64{}}
	b := &pgx.Batch{}
	b.Queue(statsRunsSQL).Query(func(rows pgx.Rows) error { return collectCounts(rows, out.Runs) })
	b.Queue(statsSessionsSQL).Query(func(rows pgx.Rows) error { return collectCounts(rows, out.Sessions) })
	b.Queue(statsStepsSQL).QueryRow(func(row pgx.Row) error { return row.Scan(&out.Steps) })
	b.Queue(statsUsageSQL).Query(func(rows pgx.Rows) error {
		var u store.UsageCount
		_, err := pgx.ForEachRow(rows, []any{&u.SourceType, &u.Success, &u.Count, &u.Sum}, func() error {
			out.Usage = append(out.Usage, u)
			return nil
		})
		return err
	})
	b.Queue(statsPendingSQL).Query(func(rows pgx.Rows) error { return collectCounts(rows, out.PendingCalls) })
	b.Queue(statsQueuesSQL).Query(func(rows pgx.Rows) error {
		var q store.QueueStats
		_, err := pgx.ForEachRow(rows, []any{&q.Queue, &q.Depth, &q.Running, &q.OldestWaitSeconds}, func() error {
			out.Queues = append(out.Queues, q)
			return nil
		})
		return err
	})
	b.Queue(statsQueueStartsSQL).Query(func(rows pgx.Rows) error {
		var q store.QueueStarts
		_, err := pgx.ForEachRow(rows, []any{&q.Queue, &q.Started, &q.AvgWaitSeconds}, func() error {
			out.QueueStarts = append(out.QueueStarts, q)
			return nil
		})
		return err
	})
	if err := s.shared.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, wrap(err, "read the database statistics")
	}
	return out, nil
}

// collectCounts reads (label, count) rows into m.
func collectCounts(rows pgx.Rows, m map[string]int64) error {
	var (
		label string
		n     int64
	)
	_, err := pgx.ForEachRow(rows, []any{&label, &n}, func() error {
		m[label] = n
		return nil
	})
	return err
}
