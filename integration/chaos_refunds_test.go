package integration_test

// The chaos suite's transactional tool (chaos-refunds sessions, whose
// refund tool is made with helix.NewTxTool): what its rows, marks and
// transcripts must show once every session completed.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
)

// chaosTxStats are the transactional tool's figures of a chaos run
// (written to HELIX_CHAOS_REPORT as "txTool").
type chaosTxStats struct {
	Sessions int `json:"sessions"` // chaos-refunds sessions
	Calls    int `json:"calls"`    // refund calls in their transcripts
	// Attempts counts the tool's executions begun (its 'start' marks,
	// written outside its transaction): the rolled-back ones too.
	Attempts int `json:"attempts"`
	// RolledBack is Attempts - Calls: executions whose writes were rolled
	// back (a kill or a Postgres restart before their commit), each run
	// again on a fresh transaction.
	RolledBack int `json:"rolledBack"`
	// CallsRunAgain counts the calls that took more than one attempt.
	CallsRunAgain int `json:"callsRunAgain"`
	// RepeatedEffects counts the calls whose effect committed more than
	// once: more than one row or committed 'done' mark, or a unique
	// violation in their result. The test requires 0.
	RepeatedEffects int `json:"repeatedEffects"`
	// KilledInside counts the kills aimed inside a refund's transaction,
	// RolledBackByKill those of them whose call then ran again (the others
	// committed between the aim and the kill).
	KilledInside     int `json:"killedInsideTx"`
	RolledBackByKill int `json:"rolledBackByKill"`
	// KilledAfterCommit counts the kills aimed just after a refund's
	// commit; the test requires that none of those calls ran again.
	KilledAfterCommit int `json:"killedAfterCommit"`
}

func (s chaosTxStats) String() string {
	return fmt.Sprintf("transactional tool: %d sessions, %d calls, %d executions (%d rolled back, %d calls run again), %d repeated effects; "+
		"kills aimed inside its transaction %d (%d rolled back and ran again), just after its commit %d (ran again: none)",
		s.Sessions, s.Calls, s.Attempts, s.RolledBack, s.CallsRunAgain, s.RepeatedEffects, s.KilledInside, s.RolledBackByKill, s.KilledAfterCommit)
}

// checkRefunds asserts, for the chaos-refunds sessions (kinds maps every
// session to its kind), that each refund call of their transcripts has its
// row in chaos_refunds exactly once, with its arguments; that no row lacks
// its call's result; that no result is an error (a unique violation would
// be a refund the tool wrote twice); and that each call's effect committed
// once (one 'done' mark, written in the tool's transaction).
func (c *chaos) checkRefunds(d *crashDB, kinds map[string]string) chaosTxStats {
	t := c.t
	ctx := t.Context()
	type refund struct {
		Order  string `json:"order"`
		Amount int    `json:"amount"`
	}
	var st chaosTxStats
	calls := map[string]refund{}   // session/call ID → the call's arguments
	results := map[string]string{} // session/call ID → the tool result the transcript holds
	var failed []string
	for _, sid := range slices.Sorted(maps.Keys(kinds)) {
		if kinds[sid] != chaosRefunds {
			continue
		}
		st.Sessions++
		for _, m := range d.messages(t, sid) {
			switch m.Role {
			case helix.RoleAssistant:
				for _, call := range m.ToolCalls {
					if call.Name != "refund" {
						continue
					}
					var in refund
					require.NoError(t, json.Unmarshal(call.Arguments, &in), "session %s: call %s's arguments", sid, call.ID)
					calls[sid+"/"+call.ID] = in
				}
			case helix.RoleTool:
				if m.ToolName != "refund" {
					continue
				}
				key := sid + "/" + m.ToolCallID
				_, dup := results[key]
				require.False(t, dup, "session %s: call %s has one result", sid, m.ToolCallID)
				results[key] = m.Content
				var out map[string]any
				require.NoError(t, json.Unmarshal([]byte(m.Content), &out), "session %s: call %s's result", sid, m.ToolCallID)
				if e, ok := out["error"]; ok {
					failed = append(failed, fmt.Sprintf("%s: %v", key, e))
					if s := fmt.Sprint(e); strings.Contains(s, "23505") || strings.Contains(s, "duplicate key") {
						st.RepeatedEffects++
					}
				}
			}
		}
	}
	st.Calls = len(calls)

	// The effects: rows of chaos_refunds (UNIQUE on session and call, so a
	// second one could only have failed), and the tool's marks.
	rows, err := c.pool.Query(ctx, `SELECT session_id || '/' || call_id, order_id, amount FROM chaos_refunds`)
	require.NoError(t, err)
	effects := map[string]refund{}
	for rows.Next() {
		var key string
		var r refund
		if err := rows.Scan(&key, &r.Order, &r.Amount); err != nil {
			rows.Close()
			require.NoError(t, err)
		}
		if _, dup := effects[key]; dup {
			st.RepeatedEffects++
		}
		effects[key] = r
	}
	rows.Close()
	require.NoError(t, rows.Err())
	marks, err := c.pool.Query(ctx, `SELECT session_id || '/' || tool_call_id, count(*) FILTER (WHERE phase = 'start'),
		count(*) FILTER (WHERE phase = 'done'), coalesce(array_agg(at) FILTER (WHERE phase = 'start'), '{}')
		FROM chaos_tool_runs WHERE session_id = ANY($1) GROUP BY 1`,
		slices.Collect(func(yield func(string) bool) {
			for sid, kind := range kinds {
				if kind == chaosRefunds && !yield(sid) {
					return
				}
			}
		}))
	require.NoError(t, err)
	attempts := map[string]int{}
	started := map[string][]time.Time{} // when each attempt began
	for marks.Next() {
		var key string
		var starts, dones int
		var at []time.Time
		if err := marks.Scan(&key, &starts, &dones, &at); err != nil {
			marks.Close()
			require.NoError(t, err)
		}
		attempts[key], started[key] = starts, at
		st.Attempts += starts
		if starts > 1 {
			st.CallsRunAgain++
		}
		if dones > 1 {
			st.RepeatedEffects++
		}
	}
	marks.Close()
	require.NoError(t, marks.Err())
	st.RolledBack = st.Attempts - len(effects)
	c.mu.Lock()
	kills := slices.Clone(c.kills)
	c.mu.Unlock()
	for _, k := range kills {
		switch {
		case k.target == "":
		case k.aim == aimInsideTx:
			st.KilledInside++
			if attempts[k.target] > 1 {
				st.RolledBackByKill++
			}
		case k.aim == aimAfterCommit:
			// Attempts before the kill may be more than one (the same call
			// may have been rolled back by an earlier kill, and run again
			// here): none may begin after it.
			st.KilledAfterCommit++
			var after []time.Time
			for _, at := range started[k.target] {
				if at.After(k.at) {
					after = append(after, at)
				}
			}
			require.Empty(t, after, "refund %s, committed when %s was killed at %s, never ran again (%s)", k.target, k.id, k.at, st)
		}
	}

	require.Zero(t, st.RepeatedEffects, "no refund's effect committed twice (%s)", st)
	require.Empty(t, failed, "no refund's result is an error (%s)", st)
	require.Equal(t, 3*st.Sessions, st.Calls, "three refund calls per session (%s)", st)
	require.ElementsMatch(t, slices.Collect(maps.Keys(calls)), slices.Collect(maps.Keys(results)), "each refund call has its result")
	require.Equal(t, calls, effects, "each refund call of the transcripts has its row, once, with its arguments, and no row lacks its call")
	for key := range calls {
		require.GreaterOrEqual(t, attempts[key], 1, "refund %s was executed", key)
	}
	return st
}

// chaosAim is where a kill is aimed.
type chaosAim int

const (
	aimInsideTx    chaosAim = iota // a worker inside a refund's transaction
	aimAfterCommit                 // a worker whose refund just committed
	aimRandom                      // a random worker
)

// aimWait bounds how long an aimed kill waits for its target before it
// falls back to a random worker.
const aimWait = 2 * time.Second

func (a chaosAim) describe(target string) string {
	switch {
	case a == aimRandom:
		return ""
	case target == "":
		return ", aimed at a refund: none in flight"
	case a == aimInsideTx:
		return ", inside refund " + target + "'s transaction"
	}
	return ", just after refund " + target + "'s commit"
}

// aimRefund picks the worker to kill: for aimInsideTx one that began a
// refund less than 60 ms ago whose 'done' mark (written in its
// transaction) is not visible, so still inside the transaction (its
// INSERT or its pause); for aimAfterCommit one whose 'done' mark became
// visible, its transaction committed, within about the last 100 ms, so
// between the tool's commit and the step's, or early in the next model
// call. The instant within that window is the poll's. It waits up to
// aimWait for such a worker, then picks one at random (target "").
func (c *chaos) aimRefund(aim chaosAim) (id string, w *crashChild, target string) {
	query := `SELECT s.worker, s.session_id || '/' || s.tool_call_id FROM chaos_tool_runs s
		WHERE s.phase = 'start' AND starts_with(s.session_id, $1) AND s.at > clock_timestamp() - interval '60 milliseconds'
			AND NOT EXISTS (SELECT 1 FROM chaos_tool_runs d WHERE d.key = s.key AND d.phase = 'done')
		ORDER BY s.at DESC`
	if aim == aimAfterCommit {
		query = `SELECT worker, session_id || '/' || tool_call_id FROM chaos_tool_runs
			WHERE phase = 'done' AND starts_with(session_id, $1) AND at > clock_timestamp() - interval '200 milliseconds'
			ORDER BY at DESC`
	}
	if aim != aimRandom {
		ctx, cancel := context.WithTimeout(c.t.Context(), aimWait)
		defer cancel()
		for ctx.Err() == nil {
			rows, err := c.pool.Query(ctx, query, chaosRefunds+"-")
			if err == nil {
				hits, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (h [2]string, err error) {
					return h, row.Scan(&h[0], &h[1]) // worker, refund call
				})
				if err == nil {
					c.mu.Lock()
					for _, h := range hits {
						if w, ok := c.workers[h[0]]; ok {
							c.mu.Unlock()
							return h[0], w, h[1]
						}
					}
					c.mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	id, w = c.pick()
	return id, w, ""
}
