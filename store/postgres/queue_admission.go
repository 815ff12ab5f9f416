package postgres

import (
	"context"
	"time"
)

// QueuePosition is where a session's current run waits in its DBOS queue.
type QueuePosition struct {
	// Queue and PartitionKey name the queue and the run's partition.
	Queue        string
	PartitionKey string
	Priority     uint
	// Since is when the run (or, after an answer, its next segment) was
	// queued.
	Since time.Time
	// Ahead counts the runs of its partition queued before it.
	Ahead int
}

// ReadQueuePosition reads where the current run (currentRun) of sessionID
// waits in its queue: its queued segment (segmentOf), with the segments of
// its partition ahead of it; or, for a run admitted through a queue whose
// driver has not enqueued its first segment yet (the milliseconds after
// it was recorded), the run itself, behind every segment of its partition
// queued at its priority or before. found is false when it does not wait
// in a queue: it runs, waits for a person, or ended. Reads only.
func ReadQueuePosition(ctx context.Context, q Querier, sessionID string) (p QueuePosition, found bool, err error) {
	var created int64
	var prio int
	err = q.QueryRow(ctx, queuedSQL, sessionID).Scan(&p.Queue, &p.PartitionKey, &prio, &created, &p.Ahead)
	if isNoRows(err) {
		return QueuePosition{}, false, nil
	}
	if err != nil {
		return QueuePosition{}, false, err
	}
	p.Priority, p.Since = uint(prio), time.UnixMilli(created)
	return p, true, nil
}

var queuedSQL = `
WITH r AS (` + currentRun("workflow_id, status, queue, queue_partition_key, coalesce(queue_priority, 0) AS prio, started_at", "$1") + `)
SELECT w.queue_name, coalesce(w.queue_partition_key, ''), coalesce(w.priority, 0), w.created_at,
	(SELECT count(*) FROM dbos.workflow_status o WHERE o.queue_name = w.queue_name AND o.status = 'ENQUEUED'
		AND coalesce(o.queue_partition_key, '') = coalesce(w.queue_partition_key, '')
		AND (coalesce(o.priority, 0), o.created_at) < (coalesce(w.priority, 0), w.created_at))
FROM r JOIN dbos.workflow_status w ON ` + segmentOf("w", "r.workflow_id") + `
WHERE w.status = 'ENQUEUED'
UNION ALL
SELECT r.queue, coalesce(r.queue_partition_key, ''), r.prio, (extract(epoch FROM r.started_at) * 1000)::bigint,
	(SELECT count(*) FROM dbos.workflow_status o WHERE o.queue_name = r.queue AND o.status = 'ENQUEUED'
		AND coalesce(o.queue_partition_key, '') = coalesce(r.queue_partition_key, '') AND coalesce(o.priority, 0) <= r.prio)
FROM r WHERE r.queue IS NOT NULL AND r.status = 'running'
	AND NOT EXISTS (SELECT 1 FROM dbos.workflow_status s
		WHERE ` + segmentOf("s", "r.workflow_id") + `)
LIMIT 1`
