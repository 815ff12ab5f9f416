package helixtest_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/helixtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

// refunds is an application's refunds table, with a UNIQUE order and no
// ON CONFLICT anywhere: a refund written twice fails, so a tool that ran
// twice would be seen.
const refundsTable = `CREATE TABLE refunds (order_id text PRIMARY KEY, amount int NOT NULL, call_id text NOT NULL)`

// refunder refunds two orders in two steps with a transactional tool,
// then answers; runs counts the tool's executions.
func refunder(runs *atomic.Int32) *helix.Agent {
	refund := helix.MustNewTxTool("refund", "Refund an order",
		func(ctx context.Context, tx pgx.Tx, in struct {
			Order  string
			Amount int
		}, tc helix.ToolContext) (string, error) {
			runs.Add(1)
			if _, err := tx.Exec(ctx, `INSERT INTO refunds (order_id, amount, call_id) VALUES ($1, $2, $3)`,
				in.Order, in.Amount, tc.ToolCallID()); err != nil {
				return "", err
			}
			return "refunded " + in.Order, nil
		})
	return &helix.Agent{Name: "refunder", Tools: []*helix.Tool{refund}, Model: scripted.New(
		scripted.Step{ToolCalls: []scripted.Call{{Name: "refund", Args: map[string]any{"Order": "A-1", "Amount": 10}}}},
		scripted.Step{ToolCalls: []scripted.Call{{Name: "refund", Args: map[string]any{"Order": "B-2", "Amount": 20}}}},
		scripted.Step{Text: "Both orders are refunded."},
	)}
}

// A transactional tool's writes commit with its record: at every crash
// point, with a replacement under the same or a new executor ID, the
// session completes and each refund is in the app's table once, with no
// unique violation. A crash before the tool's commit (AfterTool) rolls its
// write back and the replacement runs it again; a crash after it
// (AfterToolCommit) never runs it again.
func TestTxToolCrashPoints(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		point helixtest.CrashPoint
		runs  int32 // executions of the tool, both engines together
	}{
		{"before the tool's commit", helixtest.AfterTool("refund"), 3},
		{"after the tool's commit", helixtest.AfterToolCommit("refund"), 2},
		{"after the model call", helixtest.AfterModelCall(2), 2},
		{"after the step's commit", helixtest.AfterCommit(1), 2},
	} {
		for _, newID := range []bool{false, true} {
			name := tc.name + map[bool]string{false: ", same executor", true: ", new executor"}[newID]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				var runs atomic.Int32
				agent := refunder(&runs)
				url := helixtest.Database(t)
				conn, err := pgx.Connect(t.Context(), url)
				require.NoError(t, err)
				_, err = conn.Exec(t.Context(), refundsTable)
				require.NoError(t, err)
				require.NoError(t, conn.Close(t.Context()))

				e := helixtest.NewEngine(t, helixtest.EngineOptions{DatabaseURL: url, CrashAt: &tc.point}, agent)
				h := e.Start(agent, "refund my orders")
				at := e.AwaitCrash()
				require.Equal(t, tc.point.At, at.Point)

				r := e.Replacement(helixtest.ReplacementOptions{NewExecutorID: newID})
				res := r.Await(r.Attach(h))
				require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
				require.Equal(t, tc.runs, runs.Load(), "tool executions")
				r.RequireRowsOnce("refunds", 2, "order_id")
				for _, m := range r.Messages(h.SessionID) {
					if m.Role == helix.RoleTool {
						require.NotContains(t, m.Content, "error", "a tool result: %s", m.Content)
					}
				}
				r.RequireTranscriptOnce(h.SessionID)
				r.RequireStreamGapFree(h.SessionID)
			})
		}
	}
}
