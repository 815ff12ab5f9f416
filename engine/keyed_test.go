package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/helixtest"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// requireSessionLayout checks that session id is keyed or not and that
// its messages and checkpoints are in the tables of that layout only.
func requireSessionLayout(t *testing.T, pool *pgxpool.Pool, id string, keyed bool) {
	t.Helper()
	var sessKeyed bool
	var text, inKeyed int
	require.NoError(t, pool.QueryRow(context.WithoutCancel(t.Context()), `SELECT s.key IS NOT NULL,
			(SELECT count(*) FROM helix.messages WHERE session_id = $1) + (SELECT count(*) FROM helix.checkpoints WHERE session_id = $1),
			(SELECT count(*) FROM helix.messages_k WHERE session_key = s.key) + (SELECT count(*) FROM helix.checkpoints_k WHERE session_key = s.key)
		FROM helix.sessions s WHERE s.session_id = $1`, id).Scan(&sessKeyed, &text, &inKeyed))
	require.Equal(t, keyed, sessKeyed, "session %s keyed", id)
	requireRowsIn(t, keyed, text, inKeyed, "session "+id)
}

// requireRowsIn checks that what's rows are all in the keyed tables
// (inKeyed of them) or all in the text tables (text of them).
func requireRowsIn(t *testing.T, keyed bool, text, inKeyed int, what string) {
	t.Helper()
	if keyed {
		require.Zero(t, text, "rows of %s in the text tables", what)
		require.Positive(t, inKeyed, "rows of %s in the keyed tables", what)
	} else {
		require.Zero(t, inKeyed, "rows of %s in the keyed tables", what)
		require.Positive(t, text, "rows of %s in the text tables", what)
	}
}

// requireEveryReader reads session id (writing into stream) through the
// engine's and the store's readers: its messages from every offset, its
// checkpoints listed, by ID and the newest, and the stream from every
// sequence (marker rows included), each the tail of one full read.
func requireEveryReader(t *testing.T, e *helixtest.Engine, id, stream string) []store.Checkpoint {
	t.Helper()
	ctx := t.Context()
	all := e.Messages(id)
	require.NotEmpty(t, all)
	for off := range len(all) + 1 {
		page, err := e.Engine.Messages(ctx, id, &store.GetMessagesOptions{Offset: off, Limit: 2})
		require.NoError(t, err)
		require.Equal(t, len(all), page.Total)
		require.Equal(t, all[off:min(len(all), off+2)], page.Messages, "offset %d", off)
	}
	cps, err := e.Checkpoints(ctx, id, &store.ListOptions{Limit: 1000})
	require.NoError(t, err)
	require.NotEmpty(t, cps.Items)
	for _, cp := range cps.Items {
		got, err := engine.StoreOf(e.Engine).GetCheckpoint(ctx, cp.ID)
		require.NoError(t, err)
		require.Equal(t, cp, *got)
		msgs, err := engine.StoreOf(e.Engine).GetCheckpointMessages(ctx, cp.ID)
		require.NoError(t, err)
		require.Equal(t, all[:cp.MessageCount], msgs)
	}
	latest, err := engine.StoreOf(e.Engine).GetLatestCheckpoint(ctx, id)
	require.NoError(t, err)
	require.Equal(t, cps.Items[len(cps.Items)-1].ID, latest.ID)
	full, err := engine.StoreOf(e.Engine).ReadChunks(ctx, stream, 0, 100_000)
	require.NoError(t, err)
	require.NotEmpty(t, full)
	for i := range full {
		tail, err := engine.StoreOf(e.Engine).ReadChunks(ctx, stream, full[i].Sequence-1, 100_000)
		require.NoError(t, err)
		require.Len(t, tail, len(full)-i)
		for j := range tail {
			require.Equal(t, full[i+j].Sequence, tail[j].Sequence)
			require.Equal(t, string(full[i+j].Raw), string(tail[j].Raw), "read from %d", full[i].Sequence-1)
		}
	}
	return cps.Items
}

// A session created at one storage format level and its sub-agent created
// at another (the cluster's level changes while the parent's first tool
// runs: the last old replica stops, or an old one comes back) live side
// by side in one engine, each in the layout of its creation for good: a
// text parent with a keyed sub-agent writing into the parent's text
// stream, and the reverse. Every reader reads both, Retry and Branch by
// checkpoint ID work on either, and deleting the tree leaves no row of
// either layout.
func TestKeyedAndTextSessionsSideBySide(t *testing.T) {
	t.Parallel()
	for _, parentKeyed := range []bool{false, true} {
		t.Run(fmt.Sprintf("parent keyed %v", parentKeyed), func(t *testing.T) {
			t.Parallel()
			url, pool := databaseWithPool(t)
			var stop func()
			if !parentKeyed {
				stop = previousReleaseAt(t, pool, "previous-3", postgres.FormatLevelDerivedChunks)
			}
			started, release := make(chan string, 1), make(chan struct{})
			var x executions
			fail := true
			child := &helix.Agent{Name: "keyed-child", Description: "Notes things", Tools: []*helix.Tool{countTool("child_note", &x)},
				OutputSchema: json.RawMessage(summarySchema),
				Model:        script(calls(call("k1", "child_note", `{"text":"x"}`)), calls(call("fin", helix.FinishToolName, `{"summary":"s"}`)))}
			parent := &helix.Agent{Name: "keyed-parent",
				Tools: []*helix.Tool{gateTool(started, release), countTool("note", &x), helix.MustSubAgentTool(child, nil, nil)},
				Model: script(calls(call("w1", "wait", `{}`)), calls(call("s1", "subagent__keyed-child", `{"task":"t"}`)),
					calls(call("n1", "note", `{"text":"a"}`)),
					func(req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
						if fail {
							return helix.StepResult{}, &helix.ModelError{Code: helix.CodeProviderOverloaded, Message: "busy", Recoverable: true}
						}
						return text("done")(req, cb)
					})}
			e := helixtest.NewEngine(t, helixtest.EngineOptions{DatabaseURL: url, Quiet: true}, parent, child)
			// Keyed: this release's newest level (FormatLevelKeyedTables
			// or later); text: the level before the keys.
			before, after := postgres.FormatLevelNewest, postgres.FormatLevelDerivedChunks
			if !parentKeyed {
				before, after = after, before
			}
			awaitFormatLevel(t, e, before)
			h := e.Start(parent, "go")
			<-started
			if stop != nil {
				stop()
			} else {
				previousReleaseAt(t, pool, "previous-3", postgres.FormatLevelDerivedChunks)
			}
			awaitFormatLevel(t, e, after)
			close(release)
			res := e.Await(h)
			require.Equal(t, helix.AgentFailed, res.Status, "the last model call fails once")

			childID := h.SessionID + "-sub-s1"
			requireLayoutOf(t, pool, h.SessionID, parentKeyed)
			requireSessionLayout(t, pool, childID, !parentKeyed)
			e.RequireTranscriptOnce(h.SessionID)
			e.RequireTranscriptOnce(childID)
			e.RequireStreamGapFree(h.SessionID)
			cps := requireEveryReader(t, e, h.SessionID, h.SessionID)
			requireEveryReader(t, e, childID, h.SessionID)
			require.Len(t, cps, 3, "wait, sub-agent, note")

			// Retry from the sub-agent's step by its checkpoint ID (the
			// note step runs again in the retry's run), at the other level.
			fail = false
			h2, err := e.Retry(t.Context(), h.SessionID, &engine.RetryOptions{CheckpointID: cps[1].ID})
			require.NoError(t, err)
			res = e.Await(h2)
			require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
			require.Equal(t, 1, x.keys[h.WorkflowID+"/n1"], "the first run's note ran once")
			requireLayoutOf(t, pool, h.SessionID, parentKeyed)
			e.RequireTranscriptOnce(h.SessionID) // the stream has the retry's gap: its cleanup removed the note step's chunks
			requireEveryReader(t, e, h.SessionID, h.SessionID)

			// Branch from the parent's first checkpoint, by ID: the branch
			// is a session of the level of its creation.
			b := e.Execute(parent, engine.Input{}, &engine.ExecuteOptions{SessionID: h.SessionID + "-branch",
				Branch: &engine.Branch{FromSessionID: h.SessionID, CheckpointID: cps[0].ID}})
			resB := e.Await(b)
			require.Equal(t, helix.AgentCompleted, resB.Status, resB.Error)
			require.Equal(t, e.Messages(h.SessionID)[:cps[0].MessageCount], e.Messages(b.SessionID)[:cps[0].MessageCount])
			requireLayoutOf(t, pool, b.SessionID, after >= postgres.FormatLevelKeyedTables)

			// A checkpoint ID of another session, or that does not parse, is
			// not found; Retry refuses it.
			for _, id := range []string{"cpv1-" + b.SessionID + cps[0].ID[len("cpv1-"+h.SessionID):], "nonsense"} {
				_, err := engine.StoreOf(e.Engine).GetCheckpoint(t.Context(), id)
				require.ErrorIs(t, err, helix.ErrNotFound, id)
				_, err = e.Retry(t.Context(), h.SessionID, &engine.RetryOptions{CheckpointID: id})
				require.Error(t, err, id)
			}

			// Deleting the tree leaves no row of it in either layout; the
			// branch stays whole.
			branchRows := rowsWithPrefix(t, pool, b.SessionID)
			_, err = e.DeleteSession(t.Context(), h.SessionID, nil)
			require.NoError(t, err)
			for table, n := range rowsWithPrefix(t, pool, h.SessionID) {
				require.Equal(t, branchRows[table], n, "%s: only the branch's rows (its ID has the tree's as prefix) remain", table)
			}
			_, err = engine.StoreOf(e.Engine).GetCheckpoint(t.Context(), cps[0].ID)
			require.ErrorIs(t, err, helix.ErrNotFound, "the session of the ID is gone")
			requireEveryReader(t, e, b.SessionID, b.SessionID)
		})
	}
}
