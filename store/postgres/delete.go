package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	helix "github.com/helix-agents/helix-dbos"
)

// DeleteTreesOptions refine DeleteSessionTrees. The zero value refuses the
// whole batch when one tree has a run in progress.
type DeleteTreesOptions struct {
	// SkipRunning leaves a tree with a run in progress in place and lists
	// its root in DeleteStats.Running instead of refusing the batch (a
	// retention job deletes what it can).
	SkipRunning bool
}

// DeleteStats is what DeleteSessionTrees removed.
type DeleteStats struct {
	// Deleted are the roots whose trees were deleted, in the order given.
	Deleted []string `json:"deleted"`
	// NotFound are the roots that had no session (already deleted, or never
	// created): not an error.
	NotFound []string `json:"notFound"`
	// Running are the roots left in place because a run was in progress
	// (only with DeleteTreesOptions.SkipRunning).
	Running []string `json:"running"`
	// Sessions counts the sessions deleted: roots, sub-agents, companions.
	Sessions int64 `json:"sessions"`
	// Workflows counts the DBOS workflows whose rows were deleted.
	Workflows int `json:"workflows"`
	// Rows counts the rows deleted per table ("helix.messages",
	// "dbos.workflow_status", …); tables with none are left out.
	Rows map[string]int64 `json:"rows"`
}

// Keys of the rows of a session tree: its sessions, its streams, the
// workflows of its runs.
const (
	bySession = iota
	byStream
	byWorkflow
)

// deleteTables are the helix tables whose rows belong to a session tree,
// deleted in this order (owned rows before their owners, so the counts are
// exact and the schema's cascades and triggers find
// nothing left): where matches $1, the IDs of the kind key.
var deleteTables = []struct {
	table, where string
	key          int
}{
	{"helix.messages", "session_key IN (SELECT key FROM helix.sessions WHERE session_id = ANY($1))", bySession},
	{"helix.checkpoints", "session_key IN (SELECT key FROM helix.sessions WHERE session_id = ANY($1))", bySession},
	{"helix.inbox", "session_id = ANY($1)", bySession},
	{"helix.staging", "session_id = ANY($1)", bySession},
	{"helix.usage", "session_id = ANY($1)", bySession},
	{"helix.sub_session_refs", "session_id = ANY($1) OR sub_session_id = ANY($1)", bySession},
	{"helix.runs", "session_id = ANY($1)", bySession},
	{"helix.stream_chunks", "stream_key IN (SELECT key FROM helix.streams WHERE stream_id = ANY($1))", byStream},
	{"helix.stream_truncations", "stream_id = ANY($1)", byStream},
	{"helix.streams", "stream_id = ANY($1)", byStream},
	{"helix.sessions", "session_id = ANY($1)", bySession},
	{"helix.step_journal", "workflow_id = ANY($1)", byWorkflow},
}

// dbosTables are DBOS's tables keyed by workflow ID, its children before
// workflow_status (notifications, events and streams reference it with ON
// DELETE CASCADE; the payload tables have no foreign key), as DBOS's own
// DeleteWorkflows does.
var dbosTables = []struct{ table, column string }{
	{"dbos.operation_outputs", "workflow_uuid"},
	{"dbos.workflow_input", "workflow_uuid"},
	{"dbos.workflow_output", "workflow_uuid"},
	{"dbos.notifications", "destination_uuid"},
	{"dbos.workflow_events", "workflow_uuid"},
	{"dbos.workflow_events_history", "workflow_uuid"},
	{"dbos.streams", "workflow_uuid"},
	{"dbos.workflow_status", "workflow_uuid"},
}

// DeleteSessionTrees deletes the session trees of rootIDs in one
// transaction: each root with its sub-agent and companion sessions, their
// messages, checkpoints, runs, sub-session references, inbox, staging and
// usage rows, the streams they own with their chunks, truncations and
// write-batch tokens, the step journal of every workflow of their runs, and
// those workflows' DBOS rows (status, inputs, outputs, operation outputs,
// notifications, events, streams). The workflows are the runs' workflows,
// the continuations of the runs woken from hibernation and, recursively,
// their DBOS children (a queued run's segments, child workflows).
//
// The tree's session rows are locked (FOR UPDATE) before anything is
// checked, so no run can start on them meanwhile: Execute, Resume and
// Retry move a session to active with a versioned update of that row. A
// tree in which a session is active, or a workflow is PENDING, ENQUEUED or
// DELAYED, is refused with *helix.SessionRunningError (nothing of the
// batch is deleted), or skipped with opts.SkipRunning. An ID that is a
// sub-agent or companion session is refused with *helix.NotRootSessionError.
//
// Idempotent: a root that is gone is reported in DeleteStats.NotFound, and
// deleting it again is not an error. Run it in batches of at most a few
// hundred roots: the transaction holds every row lock of the batch.
func (s *Store) DeleteSessionTrees(ctx context.Context, rootIDs []string, opts *DeleteTreesOptions) (*DeleteStats, error) {
	if opts == nil {
		opts = &DeleteTreesOptions{}
	}
	stats := &DeleteStats{Rows: map[string]int64{}}
	err := s.tx(ctx, func(q Querier) error {
		*stats = DeleteStats{Rows: map[string]int64{}}
		trees, err := lockTrees(ctx, q, rootIDs)
		if err != nil {
			return err
		}
		dbos, err := hasDBOS(ctx, q)
		if err != nil {
			return err
		}
		var sessions, roots []string
		seen := map[string]bool{}
		for _, id := range rootIDs {
			if seen[id] {
				continue
			}
			seen[id] = true
			t, ok := trees[id]
			if !ok {
				stats.NotFound = append(stats.NotFound, id)
				continue
			}
			if t.parent != "" {
				return &helix.NotRootSessionError{SessionID: id, RootSessionID: t.root}
			}
			if err := checkIdle(ctx, q, id, t.sessions, dbos); err != nil {
				if opts.SkipRunning && errors.As(err, new(*helix.SessionRunningError)) {
					stats.Running = append(stats.Running, id)
					continue
				}
				return err
			}
			roots = append(roots, id)
			sessions = append(sessions, t.sessions...)
		}
		stats.Deleted = roots
		if len(roots) == 0 {
			return nil
		}
		return deleteRows(ctx, q, sessions, dbos, stats)
	})
	if err != nil {
		return nil, wrap(err, "delete session trees %v", rootIDs)
	}
	return stats, nil
}

// tree is a locked session tree: its root's parent and root (set for an ID
// that is not a root) and every session ID in it, root first.
type tree struct {
	parent, root string
	sessions     []string
}

// lockTrees locks the rows of every session in the trees of ids (in
// session ID order, one statement, so concurrent deleters cannot deadlock)
// and returns each found ID's tree.
func lockTrees(ctx context.Context, q Querier, ids []string) (map[string]*tree, error) {
	rows, err := q.Query(ctx, `WITH RECURSIVE t AS (
			SELECT session_id AS top, session_id FROM helix.sessions WHERE session_id = ANY($1)
			UNION
			SELECT t.top, c.session_id FROM helix.sessions c JOIN t ON c.parent_session_id = t.session_id
		), locked AS (
			SELECT s.session_id, coalesce(s.parent_session_id, '') AS parent, s.root_session_id AS root
			FROM helix.sessions s WHERE s.session_id IN (SELECT session_id FROM t)
			ORDER BY s.session_id FOR UPDATE
		)
		SELECT t.top, t.session_id, l.parent, l.root FROM t JOIN locked l USING (session_id)
		ORDER BY t.top, t.session_id = t.top DESC, t.session_id`, ids)
	if err != nil {
		return nil, fmt.Errorf("lock sessions: %w", err)
	}
	defer rows.Close()
	out := map[string]*tree{}
	for rows.Next() {
		var top, id, parent, root string
		if err := rows.Scan(&top, &id, &parent, &root); err != nil {
			return nil, fmt.Errorf("lock sessions: %w", err)
		}
		t := out[top]
		if t == nil {
			t = &tree{}
			out[top] = t
		}
		if id == top {
			t.parent, t.root = parent, root
		}
		t.sessions = append(t.sessions, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lock sessions: %w", err)
	}
	return out, nil
}

// checkIdle returns *helix.SessionRunningError when a session of the tree
// (locked) is active or a workflow of its runs is still pending.
func checkIdle(ctx context.Context, q Querier, root string, sessions []string, dbos bool) error {
	var id, status string
	err := q.QueryRow(ctx, `SELECT session_id, status FROM helix.sessions
		WHERE session_id = ANY($1) AND status = $2 ORDER BY session_id LIMIT 1`,
		sessions, string(helix.SessionActive)).Scan(&id, &status)
	if err == nil {
		return &helix.SessionRunningError{SessionID: root, RunningSessionID: id, Status: status}
	}
	if !isNoRows(err) {
		return fmt.Errorf("check sessions of %s: %w", root, err)
	}
	if !dbos {
		return nil
	}
	var wf string
	err = q.QueryRow(ctx, `WITH RECURSIVE `+treeWorkflows+`
		SELECT w.workflow_uuid, w.status, r.session_id FROM dbos.workflow_status w JOIN wf ON wf.id = w.workflow_uuid
		LEFT JOIN helix.runs r ON r.workflow_id = wf.top
		WHERE w.status IN ('PENDING', 'ENQUEUED', 'DELAYED') ORDER BY w.workflow_uuid LIMIT 1`,
		sessions).Scan(&wf, &status, &id)
	if err == nil {
		return &helix.SessionRunningError{SessionID: root, RunningSessionID: id, Status: status, WorkflowID: wf}
	}
	if isNoRows(err) {
		return nil
	}
	return fmt.Errorf("check workflows of %s: %w", root, err)
}

// treeWorkflows is the recursive CTE wf(id, top) of the DBOS workflows of
// the sessions $1: their runs' workflows, the continuations of the runs
// woken from hibernation (runWorkflows), and, recursively, the workflows
// DBOS records as their children (top is the run's workflow).
const treeWorkflows = `wf AS (
		` + runWorkflows + `
		UNION
		SELECT w.workflow_uuid, wf.top FROM dbos.workflow_status w JOIN wf ON w.parent_workflow_id = wf.id
	)`

// runWorkflows selects (id, top) for the workflows the runs of the
// sessions $1 started themselves: each run's own workflow, and every
// continuation 1 … wakes of a run woken from hibernation
// (helix.run_workflow_ids; an engine starts them as top-level workflows,
// so DBOS records no parent for them). The last continuation may not have
// started yet.
const runWorkflows = `SELECT unnest(helix.run_workflow_ids(workflow_id)) AS id, workflow_id AS top FROM helix.runs
		WHERE session_id = ANY($1) AND workflow_id IS NOT NULL`

// hasDBOS reports whether DBOS's schema exists (a database migrated by
// helix alone has none).
func hasDBOS(ctx context.Context, q Querier) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT to_regclass('dbos.workflow_status') IS NOT NULL`).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look for the dbos schema: %w", err)
	}
	return ok, nil
}

// treeStreamsSQL lists the streams the sessions $1 own or write to: those
// they own (their own, by the primary key; those an app gave them, through
// streams_owner_idx) and those their rows name.
const treeStreamsSQL = `SELECT stream_id FROM helix.streams WHERE owner_session_id = ANY($1) AND owner_session_id <> stream_id
	UNION SELECT stream_id FROM helix.streams WHERE stream_id = ANY($1) AND owner_session_id = stream_id
	UNION SELECT stream_id FROM helix.sessions WHERE session_id = ANY($1) AND stream_id IS NOT NULL`

// treeKeys lists the streams and the workflows of sessions: the streams
// they own or write to, and their runs' workflows with (when the database
// has DBOS's schema) every workflow DBOS records as their child.
func treeKeys(ctx context.Context, q Querier, sessions []string, dbos bool) (streams, workflows []string, err error) {
	rows, err := q.Query(ctx, treeStreamsSQL, sessions)
	if err != nil {
		return nil, nil, fmt.Errorf("list streams: %w", err)
	}
	if streams, err = collectStrings(rows); err != nil {
		return nil, nil, fmt.Errorf("list streams: %w", err)
	}
	if dbos {
		rows, err = q.Query(ctx, `WITH RECURSIVE `+treeWorkflows+` SELECT DISTINCT id FROM wf`, sessions)
	} else {
		rows, err = q.Query(ctx, `SELECT id FROM (`+runWorkflows+`) w`, sessions)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list workflows: %w", err)
	}
	if workflows, err = collectStrings(rows); err != nil {
		return nil, nil, fmt.Errorf("list workflows: %w", err)
	}
	return streams, workflows, nil
}

// deleteRows deletes the rows of the locked, idle sessions, counting them
// in stats.
func deleteRows(ctx context.Context, q Querier, sessions []string, dbos bool, stats *DeleteStats) error {
	streams, workflows, err := treeKeys(ctx, q, sessions, dbos)
	if err != nil {
		return err
	}
	stats.Workflows = len(workflows)
	count := func(table string, n int64) {
		if n > 0 {
			stats.Rows[table] += n
		}
	}
	for _, d := range deleteTables {
		n, err := q.Exec(ctx, `DELETE FROM `+d.table+` WHERE `+d.where, [][]string{sessions, streams, workflows}[d.key])
		if err != nil {
			return fmt.Errorf("delete from %s: %w", d.table, err)
		}
		count(d.table, n)
	}
	stats.Sessions = stats.Rows["helix.sessions"]
	// A write-batch token names the streams it wrote: the tree's are taken
	// out of it, and a token left with none is deleted.
	n, err := q.Exec(ctx, `DELETE FROM helix.stream_write_batches WHERE streams <@ $1::text[]`, streams)
	if err != nil {
		return fmt.Errorf("delete from helix.stream_write_batches: %w", err)
	}
	count("helix.stream_write_batches", n)
	if _, err := q.Exec(ctx, `UPDATE helix.stream_write_batches
		SET streams = ARRAY(SELECT x FROM unnest(streams) x WHERE x <> ALL($1::text[]))
		WHERE streams && $1::text[]`, streams); err != nil {
		return fmt.Errorf("update helix.stream_write_batches: %w", err)
	}
	if !dbos {
		return nil
	}
	for _, d := range dbosTables {
		n, err := q.Exec(ctx, `DELETE FROM `+d.table+` WHERE `+d.column+` = ANY($1)`, workflows)
		if err != nil {
			return fmt.Errorf("delete from %s: %w", d.table, err)
		}
		count(d.table, n)
	}
	return nil
}

// collectStrings reads one text column and closes rows.
func collectStrings(rows Rows) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// PendingTreeWorkflows returns the workflows of the session tree of rootID
// (its runs' workflows, their continuations and their DBOS children) that
// DBOS has not finished: PENDING, ENQUEUED or DELAYED. A database without DBOS's schema has none.
func (s *Store) PendingTreeWorkflows(ctx context.Context, rootID string) ([]string, error) {
	dbos, err := hasDBOS(ctx, s.q)
	if err != nil || !dbos {
		return nil, wrap(err, "pending workflows of %s", rootID)
	}
	rows, err := s.q.Query(ctx, subtreeSQL+`,
		`+strings.ReplaceAll(treeWorkflows, "$1", "ARRAY(SELECT session_id FROM tree)")+`
		SELECT w.workflow_uuid FROM dbos.workflow_status w JOIN wf ON wf.id = w.workflow_uuid
		WHERE w.status IN ('PENDING', 'ENQUEUED', 'DELAYED') ORDER BY 1`, rootID)
	if err != nil {
		return nil, wrap(err, "pending workflows of %s", rootID)
	}
	ids, err := collectStrings(rows)
	return ids, wrap(err, "pending workflows of %s", rootID)
}
