package engine_test

import (
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/helixtest"
)

// A sub-agent writes its steps into its parent's stream; from the storage
// format level of derived chunks its commits' chunk rows there are marker
// rows rendered from the child's own checkpoint and messages. The child
// crashes after its tool ran, before the step's commit: the replacement
// runs the tool again (same key), commits once, and the parent's stream
// holds each of the child's lifecycle chunks once, rendered with the
// child's agent ID and the tool's result.
func TestSubAgentMarkersInTheParentStream(t *testing.T) {
	t.Parallel()
	var x executions
	child := &helix.Agent{Name: "marker-child", Description: "Notes things", Tools: []*helix.Tool{countTool("child_note", &x)},
		OutputSchema: json.RawMessage(summarySchema),
		Model:        script(calls(call("k1", "child_note", `{"text":"x"}`)), calls(call("fin", helix.FinishToolName, `{"summary":"s"}`)))}
	parent := &helix.Agent{Name: "marker-parent", Tools: []*helix.Tool{countTool("note", &x), helix.MustSubAgentTool(child, nil, nil)},
		Model: script(calls(call("s1", "subagent__marker-child", `{"task":"t"}`)), calls(call("n1", "note", `{"text":"a"}`)), text("done"))}
	crash := helixtest.AfterTool("child_note")
	first := helixtest.NewEngine(t, helixtest.EngineOptions{CrashAt: &crash, Quiet: true}, parent, child)
	h := first.Start(parent, "go")
	first.AwaitCrash()

	second := first.Replacement(helixtest.ReplacementOptions{})
	res := second.Await(second.Attach(h))
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	childID := h.SessionID + "-sub-s1"
	require.Equal(t, map[string]int{childWorkflow(t, second, childID) + "/k1": 2, h.WorkflowID + "/n1": 1}, x.keys,
		"the child's tool ran again after the crash, with its key; the parent's once")
	second.RequireTranscriptOnce(h.SessionID)
	second.RequireTranscriptOnce(childID)
	second.RequireStreamGapFree(h.SessionID)

	pool, err := pgxpool.New(t.Context(), second.URL())
	require.NoError(t, err)
	defer pool.Close()
	var markers int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM helix.stream_chunks c JOIN helix.streams t ON t.key = c.stream_key JOIN helix.runs r ON r.run_id = c.run_id
		WHERE t.stream_id = $1 AND r.session_id = $2 AND left(c.chunk::text, 3) = '[4,'`, h.SessionID, childID).Scan(&markers))
	require.Positive(t, markers, "the child's commits in the parent's stream are marker rows")

	var ends []*helix.ToolEndChunk
	for _, c := range second.Stream(h.SessionID) {
		if e, ok := c.Chunk.(*helix.ToolEndChunk); ok && e.ToolCallID == "k1" {
			ends = append(ends, e)
		}
	}
	require.Len(t, ends, 1, "the child's tool_end once")
	require.Equal(t, childID, ends[0].AgentID)
	require.JSONEq(t, `"noted"`, string(ends[0].Result))
}
