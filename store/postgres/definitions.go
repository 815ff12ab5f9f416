package postgres

// The SQL definitions the store's statements share. Each notion the
// cluster relies on ("the executor is alive", "the current run of a
// session", "a segment of a queued run") is spelled once here and composed
// into every statement that needs it, so that the takeover sweep, the
// format level, the heartbeat and the operators' views (ReadCluster) can
// never disagree about it.

// executorInService is the condition that the executor whose
// helix.executors row is x (a table alias, or "" for an unqualified row)
// neither stopped nor was taken over: it still claims to serve the
// cluster. Whether it does is executorLeaseFresh.
func executorInService(x string) string {
	return col(x, "stopped_at") + " IS NULL AND " + col(x, "taken_over_by") + " IS NULL"
}

// executorLeaseFresh is the condition that the lease of the executor whose
// helix.executors row is x has not expired, by the database's clock: its
// last heartbeat is more recent than its own lease (lease_ms, which each
// executor records).
func executorLeaseFresh(x string) string {
	return col(x, "heartbeat_at") + " > now() - " + col(x, "lease_ms") + " * interval '1 millisecond'"
}

// executorAlive is the definition of an alive executor, as a condition on
// its helix.executors row x: in service (neither stopped nor taken over)
// with a fresh lease. An executor that is not alive may be taken over (the
// takeover sweep claims exactly those, with pending workflows); an alive
// one holds its executor ID against every other process, and the storage
// format level of the cluster is the lowest an alive executor reads.
func executorAlive(x string) string {
	return executorInService(x) + " AND " + executorLeaseFresh(x)
}

// currentRun selects columns of the current run of the session whose ID
// is the SQL expression session: its run of the highest turn. Turns are
// allocated one after another under the session's lock (CreateRun), so
// the current run is also the newest. In a subquery, qualify outer columns
// in columns and session: the runs' own are unqualified.
func currentRun(columns, session string) string {
	return "SELECT " + columns + " FROM helix.runs WHERE session_id = " + session + " ORDER BY turn DESC LIMIT 1"
}

// SegmentInfix separates a queued run's workflow ID (its driver's) from
// the number of one of its segments in the segment's workflow ID:
// "<driver>-seg-<k>". A durable identity: changing it strands the segments
// of running queued runs.
const SegmentInfix = "-seg-"

// segmentOf is the condition that the dbos.workflow_status row w is a
// segment of the queued run whose driver's workflow ID is the SQL
// expression driver: a child workflow of the driver, or of one of its
// continuations after a hibernation (helix.run_workflow_ids), whose ID has
// the segment prefix (a sub-agent's run, also a child, has not).
func segmentOf(w, driver string) string {
	return col(w, "parent_workflow_id") + " = ANY(helix.run_workflow_ids(" + driver + ")) AND starts_with(" + col(w, "workflow_uuid") + ", " + driver +
		" || '" + SegmentInfix + "')"
}

// col qualifies column with the alias x (none when x is empty).
func col(x, column string) string {
	if x == "" {
		return column
	}
	return x + "." + column
}
