package postgres_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// A step commit's checkpoint carries what StepCommit.Journal renders, given
// what the commit decided; when a retry's
// TruncateMessages deletes the checkpoint, the records it carries stay, in
// helix.step_journal: the workflow that wrote them may still recover (a
// crash after its last commit) and must replay them, not run its tools and
// commit again.
func TestCheckpointJournalOutlivesItsCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: "j", AgentType: "a"})
	require.NoError(t, err)
	_, err = st.AppendMessages(ctx, "j", []helix.Message{helix.UserMessage("go")})
	require.NoError(t, err)
	_, err = st.CreateRun(ctx, store.CreateRunParams{RunID: "j-run", SessionID: "j", WorkflowID: "j-turn-1"})
	require.NoError(t, err)
	var seen []store.StepCommitResult
	res, err := st.CommitStep(ctx, store.StepCommit{SessionID: "j", RunID: "j-run", Step: 1,
		Messages: []helix.Message{helix.AssistantMessage("done")},
		Journal: func(r store.StepCommitResult) (string, error) {
			seen = append(seen, r)
			return `[0,1000001,1700000000000,["helix.run_tool",0,3,null,{"ok":true}],["helix.commit_step",4,5,null,{"<o":2}]]`, nil
		}})
	require.NoError(t, err)
	require.Len(t, seen, 1, "rendered once")
	require.Equal(t, res.CheckpointID, seen[0].CheckpointID)
	require.Equal(t, 2, seen[0].MessageCount)

	type record struct {
		WF, Name, Output string
		ID               int
	}
	records := func() []record {
		t.Helper()
		rows, err := st.Pool().Query(ctx, `SELECT workflow_id, name, output, id FROM helix.step_journal_records ORDER BY id`)
		require.NoError(t, err)
		defer rows.Close()
		var out []record
		for rows.Next() {
			var r record
			require.NoError(t, rows.Scan(&r.WF, &r.Name, &r.Output, &r.ID))
			out = append(out, r)
		}
		require.NoError(t, rows.Err())
		return out
	}
	want := []record{
		{"j-turn-1", "helix.run_tool", `{"ok":true}`, 1_000_001},
		{"j-turn-1", "helix.commit_step", `{"checkpointId":"` + res.CheckpointID + `","messageCount":2}`, 1_000_002},
	}
	require.Equal(t, want, records())
	var rows int
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM helix.step_journal`).Scan(&rows))
	require.Zero(t, rows, "the checkpoint's")

	require.NoError(t, st.TruncateMessages(ctx, "j", 1))
	_, err = st.GetCheckpoint(ctx, res.CheckpointID)
	require.ErrorIs(t, err, helix.ErrNotFound, "the checkpoint is gone")
	require.Equal(t, want, records(), "its records are not")
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM helix.step_journal WHERE workflow_id = 'j-turn-1'`).Scan(&rows))
	require.Equal(t, 2, rows, "a row per record")
}
