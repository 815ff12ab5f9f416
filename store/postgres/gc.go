package postgres

import (
	"context"
	"fmt"
	"time"
)

// GCSelection says which root sessions a garbage-collection pass deletes
// (see SelectGCRoots). A nil age keeps the sessions of that status
// forever.
type GCSelection struct {
	// Completed selects completed trees whose last activity is older.
	Completed *time.Duration
	// Failed selects failed trees (not aborted) whose last activity is
	// older.
	Failed *time.Duration
	// Aborted selects aborted trees (failed, their root's last run failed
	// with error code "aborted") whose last activity is older.
	Aborted *time.Duration
	// Expired selects trees whose root's expires_at has passed, whatever
	// their status, unless the root is active.
	Expired bool
}

// gcSelectSQL selects up to $6 root sessions after $1 (session ID order)
// that sel picks. A tree's age is the time since its last activity: the
// latest change of its sessions, GREATEST(updated_at, checkpointed_at) (see
// sessionColumns; a companion that ran yesterday keeps last month's root). A tree in which a session is active is never picked
// (DeleteSessionTrees refuses it anyway). Ages are measured on the
// database's clock; $2..$4 are seconds or NULL (keep forever).
var gcSelectSQL = `
SELECT s.session_id FROM helix.sessions s
CROSS JOIN LATERAL (SELECT
	CASE WHEN s.status = 'completed' THEN now() - make_interval(secs => $2)
	     WHEN s.status = 'failed' AND (` + currentRun("error_code", "s.session_id") + `) IS NOT DISTINCT FROM 'aborted'
	     THEN now() - make_interval(secs => $4)
	     WHEN s.status = 'failed' THEN now() - make_interval(secs => $3)
	END AS cutoff,
	coalesce($5 AND s.expires_at < now(), false) AS expired) k
WHERE s.parent_session_id IS NULL AND s.status <> 'active' AND s.session_id > $1
  AND (k.expired OR GREATEST(s.updated_at, s.checkpointed_at) < k.cutoff)
  AND NOT EXISTS (SELECT 1 FROM helix.sessions d
                  WHERE d.root_session_id = s.session_id AND d.parent_session_id IS NOT NULL
                    AND (d.status = 'active' OR (NOT k.expired AND GREATEST(d.updated_at, d.checkpointed_at) >= k.cutoff)))
ORDER BY s.session_id LIMIT $6`

// SelectGCRoots returns up to limit root sessions, in session ID order
// after after ("" for the first batch), whose trees sel picks: page through
// them by passing the last ID returned. Read-only; a session picked may
// start a run before it is deleted, which DeleteSessionTrees refuses under
// its row locks.
func (s *Store) SelectGCRoots(ctx context.Context, sel GCSelection, after string, limit int) ([]string, error) {
	secs := func(d *time.Duration) *float64 {
		if d == nil {
			return nil
		}
		v := d.Seconds()
		return &v
	}
	rows, err := s.q.Query(ctx, gcSelectSQL, after, secs(sel.Completed), secs(sel.Failed), secs(sel.Aborted), sel.Expired, limit)
	if err != nil {
		return nil, wrap(err, "select sessions to collect after %q", after)
	}
	ids, err := collectStrings(rows)
	return ids, wrap(err, "select sessions to collect after %q", after)
}

// TreeSize is what deleting session trees would remove: rows and their
// bytes (pg_column_size of each row, an estimate of the space freed once
// vacuumed) per table.
type TreeSize struct {
	// Sessions counts the trees' sessions.
	Sessions int64 `json:"sessions"`
	// Workflows counts the DBOS workflows of their runs.
	Workflows int `json:"workflows"`
	// Rows counts rows per table, as DeleteStats.Rows; empty tables are
	// left out.
	Rows map[string]int64 `json:"rows"`
	// Bytes estimates the bytes of those rows per table.
	Bytes map[string]int64 `json:"bytes"`
}

// Add adds o's counts to z.
func (z *TreeSize) Add(o *TreeSize) {
	z.Sessions += o.Sessions
	z.Workflows += o.Workflows
	for k, v := range o.Rows {
		z.Rows[k] += v
	}
	for k, v := range o.Bytes {
		z.Bytes[k] += v
	}
}

// Sub subtracts o's counts from z, dropping tables left at zero.
func (z *TreeSize) Sub(o *TreeSize) {
	z.Sessions -= o.Sessions
	z.Workflows -= o.Workflows
	for k, v := range o.Rows {
		if z.Rows[k] -= v; z.Rows[k] <= 0 {
			delete(z.Rows, k)
		}
	}
	for k, v := range o.Bytes {
		if z.Bytes[k] -= v; z.Bytes[k] <= 0 {
			delete(z.Bytes, k)
		}
	}
}

// NewTreeSize returns an empty TreeSize.
func NewTreeSize() *TreeSize {
	return &TreeSize{Rows: map[string]int64{}, Bytes: map[string]int64{}}
}

// MeasureSessionTrees counts the rows (and estimates their bytes) that
// DeleteSessionTrees would delete for rootIDs, deleting nothing and
// locking nothing: the rows of the same tables, found the same way.
func (s *Store) MeasureSessionTrees(ctx context.Context, rootIDs []string) (*TreeSize, error) {
	z := NewTreeSize()
	if len(rootIDs) == 0 {
		return z, nil
	}
	err := s.measure(ctx, rootIDs, z)
	return z, wrap(err, "measure session trees %v", rootIDs)
}

func (s *Store) measure(ctx context.Context, rootIDs []string, z *TreeSize) error {
	q := s.q
	rows, err := q.Query(ctx, `WITH RECURSIVE t AS (
			SELECT session_id FROM helix.sessions WHERE session_id = ANY($1)
			UNION
			SELECT c.session_id FROM helix.sessions c JOIN t ON c.parent_session_id = t.session_id
		) SELECT session_id FROM t`, rootIDs)
	if err != nil {
		return fmt.Errorf("list sessions: %w", err)
	}
	sessions, err := collectStrings(rows)
	if err != nil {
		return fmt.Errorf("list sessions: %w", err)
	}
	dbos, err := hasDBOS(ctx, q)
	if err != nil {
		return err
	}
	streams, workflows, err := treeKeys(ctx, q, sessions, dbos)
	if err != nil {
		return err
	}
	z.Workflows += len(workflows)
	count := func(table, where string, arg any) error {
		var n, b int64
		err := q.QueryRow(ctx, `SELECT count(*), coalesce(sum(pg_column_size(t.*)), 0)::bigint FROM `+table+` t WHERE `+where, arg).Scan(&n, &b)
		if err != nil {
			return fmt.Errorf("measure %s: %w", table, err)
		}
		if n > 0 {
			z.Rows[table] += n
			z.Bytes[table] += b
		}
		return nil
	}
	for _, d := range deleteTables {
		if err := count(d.table, d.where, [][]string{sessions, streams, workflows}[d.key]); err != nil {
			return err
		}
	}
	z.Sessions += int64(len(sessions))
	if err := count("helix.stream_write_batches", "streams <@ $1::text[]", streams); err != nil {
		return err
	}
	if !dbos {
		return nil
	}
	for _, d := range dbosTables {
		if err := count(d.table, d.column+" = ANY($1)", workflows); err != nil {
			return err
		}
	}
	return nil
}
