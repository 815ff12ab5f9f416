package postgres

import (
	"context"
	"encoding/json"
	"fmt"
)

// RunTools returns the tool list recorded on run runID (helix.runs.tools;
// nil for none yet), and, when from is not "", the list of run from (the
// run whose suspended step a resume finishes: nil for none).
func RunTools(ctx context.Context, q Querier, runID, from string) (own, previous json.RawMessage, err error) {
	err = q.QueryRow(ctx, `SELECT (SELECT tools FROM helix.runs WHERE run_id = $1),
		(SELECT tools FROM helix.runs WHERE run_id = $2 AND $2 <> '')`, runID, from).Scan(&own, &previous)
	if err != nil {
		return nil, nil, fmt.Errorf("read the tool list of run %s: %w", runID, err)
	}
	return own, previous, nil
}

// PinRunTools records tools (a JSON value) as run runID's tool list unless
// the run has one, and returns the run's list: an execution that raced
// another keeps the first one's.
func PinRunTools(ctx context.Context, q Querier, runID string, tools json.RawMessage) (json.RawMessage, error) {
	var out json.RawMessage
	err := q.QueryRow(ctx, `WITH pinned AS (
			UPDATE helix.runs SET tools = $2 WHERE run_id = $1 AND tools IS NULL RETURNING tools)
		SELECT tools FROM pinned UNION ALL SELECT tools FROM helix.runs WHERE run_id = $1 AND NOT EXISTS (SELECT 1 FROM pinned)`,
		runID, tools).Scan(&out)
	if isNoRows(err) {
		return nil, notFound("run", runID)
	}
	if err != nil {
		return nil, fmt.Errorf("record the tool list of run %s: %w", runID, err)
	}
	return out, nil
}
