package postgres_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// tableRows counts the rows of session (or stream) id in each physical
// table of the two layouts.
func tableRows(t *testing.T, st *postgres.Store, id string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for table, q := range map[string]string{
		"messages":        `SELECT count(*) FROM helix.messages WHERE session_id = $1`,
		"messages_k":      `SELECT count(*) FROM helix.messages_k WHERE session_key = (SELECT key FROM helix.sessions WHERE session_id = $1)`,
		"checkpoints":     `SELECT count(*) FROM helix.checkpoints WHERE session_id = $1`,
		"checkpoints_k":   `SELECT count(*) FROM helix.checkpoints_k WHERE session_key = (SELECT key FROM helix.sessions WHERE session_id = $1)`,
		"stream_chunks":   `SELECT count(*) FROM helix.stream_chunks WHERE stream_id = $1`,
		"stream_chunks_k": `SELECT count(*) FROM helix.stream_chunks_k WHERE stream_key = (SELECT key FROM helix.streams WHERE stream_id = $1)`,
	} {
		var n int
		require.NoError(t, st.Pool().QueryRow(t.Context(), q, id).Scan(&n))
		out[table] = n
	}
	return out
}

// requireLayout checks that session id's messages and checkpoints, and
// stream's chunk rows, are in the tables of their layouts only.
func requireLayout(t *testing.T, st *postgres.Store, id string, keyed bool, stream string, streamKeyed bool) {
	t.Helper()
	own, str := tableRows(t, st, id), tableRows(t, st, stream)
	in, out := "", "_k"
	if keyed {
		in, out = out, in
	}
	for _, table := range []string{"messages", "checkpoints"} {
		require.Positive(t, own[table+in], "%s: %s%s", id, table, in)
		require.Zero(t, own[table+out], "%s: %s%s", id, table, out)
	}
	in, out = "", "_k"
	if streamKeyed {
		in, out = out, in
	}
	require.Positive(t, str["stream_chunks"+in], "%s: stream_chunks%s", stream, in)
	require.Zero(t, str["stream_chunks"+out], "%s: stream_chunks%s", stream, out)
}

// requireReaders reads session id through every reader of its messages
// and checkpoints and checks they agree with what was written.
func requireReaders(t *testing.T, st *postgres.Store, id string, msgs []helix.Message, checkpoints int) []store.Checkpoint {
	t.Helper()
	ctx := t.Context()
	for off := 0; off <= len(msgs); off++ {
		for _, limit := range []int{1, 2, 100} {
			page, err := st.GetMessages(ctx, id, &store.GetMessagesOptions{Offset: off, Limit: limit})
			require.NoError(t, err)
			require.Equal(t, len(msgs), page.Total)
			want := msgs[off:min(len(msgs), off+limit)]
			require.Len(t, page.Messages, len(want), "offset %d limit %d", off, limit)
			for i := range want {
				require.Equal(t, want[i].Content, page.Messages[i].Content, "offset %d, message %d", off, i)
			}
		}
	}
	list, err := st.ListCheckpoints(ctx, id, &store.ListOptions{Limit: 100})
	require.NoError(t, err)
	require.Equal(t, checkpoints, list.Total)
	require.Len(t, list.Items, checkpoints)
	for i, cp := range list.Items {
		got, err := st.GetCheckpoint(ctx, cp.ID)
		require.NoError(t, err, "checkpoint %d", i)
		require.Equal(t, cp, *got)
		require.Equal(t, id, got.SessionID)
		cpMsgs, err := st.GetCheckpointMessages(ctx, cp.ID)
		require.NoError(t, err)
		require.Len(t, cpMsgs, cp.MessageCount)
		if i > 0 {
			require.Less(t, list.Items[i-1].CreatedAt.UnixNano(), cp.CreatedAt.UnixNano()+1, "listed in write order")
		}
	}
	latest, err := st.GetLatestCheckpoint(ctx, id)
	require.NoError(t, err)
	require.Equal(t, list.Items[len(list.Items)-1].ID, latest.ID)
	state, err := st.LoadState(ctx, id)
	require.NoError(t, err)
	require.Equal(t, latest.ID, state.CheckpointID)
	view, err := st.ReadStep(ctx, store.ReadStepParams{SessionID: id, RunID: id + "-run"})
	require.NoError(t, err)
	require.Equal(t, latest.ID, view.CheckpointID)
	if latest.StreamSequence != nil {
		require.Equal(t, *latest.StreamSequence, view.CheckpointSequence)
	}
	return list.Items
}

// TestLayoutsSideBySide runs sessions of both layouts in one store, a
// parent and its sub-agent in each combination of layouts (the sub-agent
// writes into its parent's stream), with the format level changing
// between every write: each session's rows stay in its own layout, and
// every reader reads them whole.
func TestLayoutsSideBySide(t *testing.T) {
	t.Parallel()
	gate := postgres.NewFormatGate(postgres.FormatLevelNewest)
	st := newTestStore(t, postgres.WithFormatGate(gate))
	ctx := t.Context()
	text, keyed := postgres.FormatLevelDerivedChunks, postgres.FormatLevelKeyedTables
	for _, c := range []struct{ parent, child postgres.FormatLevel }{{text, keyed}, {keyed, text}, {text, text}, {keyed, keyed}} {
		t.Run(fmt.Sprintf("parent %d child %d", c.parent, c.child), func(t *testing.T) {
			p, ch := fmt.Sprintf("side-p%d%d", c.parent, c.child), fmt.Sprintf("side-c%d%d", c.parent, c.child)
			gate.Set(c.parent)
			markerSession(t, st, p, "bench", "")
			gate.Set(c.child)
			markerSession(t, st, ch, "bench", p)
			streamReads := func() []string {
				page, err := st.ReadChunks(ctx, p, 0, 10_000)
				require.NoError(t, err)
				out := make([]string, len(page))
				for i, sc := range page {
					require.Equal(t, int64(i+1), sc.Sequence)
					out[i] = string(sc.Raw)
				}
				return out
			}
			var all []string
			for step := 1; step <= 3; step++ {
				for _, sess := range []string{p, ch} {
					gate.Set(text + postgres.FormatLevel(step%2)) // the level of the write does not matter
					raws, before := commitMarkerStep(t, st, sess, sess+"-run", "bench", step, markerStep{held: step != 2, tools: step})
					requireReadsBack(t, st, p, before, raws)
					all = append(all, raws...)
				}
			}
			require.Equal(t, all, streamReads())
			requireLayout(t, st, p, c.parent == keyed, p, c.parent == keyed)
			requireLayout(t, st, ch, c.child == keyed, p, c.parent == keyed)
			msgsOf := func(sess string) []helix.Message {
				page, err := st.GetMessages(ctx, sess, &store.GetMessagesOptions{Limit: 1000})
				require.NoError(t, err)
				require.Len(t, page.Messages, 1+(1+1)+(1+2)+(1+3))
				return page.Messages
			}
			pMsgs, cMsgs := msgsOf(p), msgsOf(ch)
			pCps := requireReaders(t, st, p, pMsgs, 3)
			cCps := requireReaders(t, st, ch, cMsgs, 3)

			// An ID that names another session, does not parse, or whose
			// session is gone is not found.
			for _, id := range []string{
				"cpv1-" + ch + pCps[0].ID[len("cpv1-"+p):], "not-a-checkpoint", "cpv1-nobody-s1-t1-abc",
				pCps[0].ID + "0", "cpv1-" + p + "-s01-t1-a",
			} {
				_, err := st.GetCheckpoint(ctx, id)
				require.ErrorIs(t, err, helix.ErrNotFound, id)
			}

			// A checkpoint with an ID of the caller's: in helix.checkpoints,
			// listed in write order with the others.
			gate.Set(keyed)
			custom, err := st.CreateCheckpoint(ctx, ch, store.CheckpointParams{ID: "custom-" + ch, StepCount: 3, MessageCount: -1})
			require.NoError(t, err)
			cCps = requireReaders(t, st, ch, cMsgs, 4)
			require.Equal(t, custom.ID, cCps[3].ID)
			_, err = st.CreateCheckpoint(ctx, p, store.CheckpointParams{ID: cCps[0].ID, StepCount: 1})
			require.ErrorContains(t, err, "already belongs to session "+ch)

			// Branch from a checkpoint into a session of the other layout.
			for i, level := range []postgres.FormatLevel{text, keyed} {
				gate.Set(level)
				to := fmt.Sprintf("%s-branch%d", p, i)
				_, err := st.CloneSession(ctx, store.CloneParams{FromSessionID: p, ToSessionID: to, CheckpointID: pCps[1].ID})
				require.NoError(t, err)
				page, err := st.GetMessages(ctx, to, &store.GetMessagesOptions{Limit: 1000})
				require.NoError(t, err)
				require.Len(t, page.Messages, pCps[1].MessageCount)
				require.Equal(t, pMsgs[:pCps[1].MessageCount], page.Messages)
				rows := tableRows(t, st, to)
				if level == keyed {
					require.Equal(t, pCps[1].MessageCount, rows["messages_k"])
				} else {
					require.Equal(t, pCps[1].MessageCount, rows["messages"])
				}
			}

			// Truncating the sub-agent to its first step: its later
			// checkpoints go (their markers in the parent's stream are
			// rewritten as literal rows first), the stream reads the same.
			gate.Set(text + postgres.FormatLevel(len(p)%2))
			require.NoError(t, st.TruncateMessages(ctx, ch, cCps[0].MessageCount))
			requireReaders(t, st, ch, cMsgs[:cCps[0].MessageCount], 1)
			require.Equal(t, all, streamReads())
			for _, cp := range cCps[1:] {
				_, err := st.GetCheckpoint(ctx, cp.ID)
				require.ErrorIs(t, err, helix.ErrNotFound)
			}
			requireReaders(t, st, p, pMsgs, 3)

			// Cleaning the stream up to the parent's step 2 removes the
			// step 3 rows of both sessions' runs, from the stream's layout.
			res, err := st.CleanupToStep(ctx, p, 2, 0)
			require.NoError(t, err)
			require.Positive(t, res.Removed)
			after := streamReads()
			require.Len(t, after, len(all)-int(res.Removed))
			require.Equal(t, all[:len(after)], after)

			// Deleting the tree leaves nothing in either layout.
			for _, id := range []string{ch, p} {
				_, err := st.CompareAndSetStatus(ctx, id, []helix.SessionStatus{helix.SessionActive}, helix.SessionCompleted, nil)
				require.NoError(t, err)
			}
			stats, err := st.DeleteSessionTrees(ctx, []string{p}, nil)
			require.NoError(t, err)
			require.Equal(t, []string{p}, stats.Deleted)
			require.EqualValues(t, len(pMsgs)+cCps[0].MessageCount, stats.Rows["helix.messages"])
			for _, id := range []string{p, ch} {
				for table, n := range tableRows(t, st, id) {
					require.Zero(t, n, "%s: %s", id, table)
				}
			}
			for _, cp := range slices.Concat(pCps, cCps[:1]) {
				_, err := st.GetCheckpoint(ctx, cp.ID)
				require.True(t, errors.Is(err, helix.ErrNotFound), "%s: %v", cp.ID, err)
			}
		})
	}
}

// The model-row tests (model_rows_test.go) run on keyed sessions, the
// newest level's; a session of the text tables (created below
// FormatLevelKeyedTables, as an older release's) and a keyed one record a
// model call as a pending row in their own layout, hide it from every
// reader, keep it at the step's commit, and move the records of the rows
// a truncation removes to helix.step_journal.
func TestModelRowsInBothLayouts(t *testing.T) {
	t.Parallel()
	for _, level := range []postgres.FormatLevel{postgres.FormatLevelDerivedChunks, postgres.FormatLevelKeyedTables} {
		t.Run(fmt.Sprintf("level %d", level), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			st := newClusterStore(t, postgres.WithFormatGate(postgres.NewFormatGate(level)))
			modelRowSession(t, st, "p")
			require.Nil(t, recordModelRow(ctx, t, st, "p", 0, 0), "seq 0 is not the message count")
			require.NotNil(t, recordModelRow(ctx, t, st, "p", 1, 1))
			requireMessages(t, st, "p", 1)
			rows := tableRows(t, st, "p")
			if level == postgres.FormatLevelKeyedTables {
				require.Equal(t, 2, rows["messages_k"], "the user message and the pending row")
				require.Zero(t, rows["messages"])
			} else {
				require.Equal(t, 2, rows["messages"])
				require.Zero(t, rows["messages_k"])
			}
			_, err := st.CommitStep(ctx, store.StepCommit{SessionID: "p", RunID: "p-run", Step: 1, ExpectMessageCount: 1,
				Messages: []helix.Message{assistant, helix.ToolResultMessage("c1", "note", "ok")}})
			require.NoError(t, err)
			requireMessages(t, st, "p", 3)
			var metas int
			require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM helix.all_messages WHERE session_id = 'p' AND meta IS NOT NULL`).Scan(&metas))
			require.Equal(t, 1, metas, "the commit kept the pending row, its record with it")
			require.NotNil(t, recordModelRow(ctx, t, st, "p", 3, 3), "step 2's, pending")
			require.NoError(t, st.TruncateMessages(ctx, "p", 1))
			requireMessages(t, st, "p", 1)
			require.Equal(t, []int{1_000_000, 1_000_001, 1_000_003}, journalModelRecords(t, st, "p"),
				"the refused record, and the rows the truncation removed")
		})
	}
}
