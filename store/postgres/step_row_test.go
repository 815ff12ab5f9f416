package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// TestStepMovesLastChange: a step's commit and a stream append leave the
// rows' updated_at columns alone (fewer bytes of WAL per
// step), and every reader still sees them as the last change: the
// session's UpdatedAt (LoadState, ListSessions, PageSessions), the stream's
// (GetStreamInfo), and retention's last activity (SelectGCRoots). The
// session and its stream are aged two days first, as if created then: a
// reader of updated_at alone would see them two days old after the steps.
func TestStepMovesLastChange(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	const sid = "last-change"
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: sid, AgentType: "x", UserID: "u"})
	require.NoError(t, err)
	run, err := st.CreateRun(ctx, store.CreateRunParams{RunID: sid + "-run", SessionID: sid})
	require.NoError(t, err)
	_, err = st.AppendMessages(ctx, sid, []helix.Message{helix.UserMessage("hi")})
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `UPDATE helix.sessions SET updated_at = now() - interval '2 days' WHERE session_id = $1`, sid)
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `UPDATE helix.streams SET updated_at = now() - interval '2 days' WHERE stream_id = $1`, sid)
	require.NoError(t, err)

	dbNow := func() time.Time {
		var now time.Time
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT now()`).Scan(&now))
		return now
	}
	rawUpdatedAt := func(table, key string) time.Time {
		var at time.Time
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT updated_at FROM helix.`+table+` WHERE `+key+` = $1`, sid).Scan(&at))
		return at
	}
	// sessionSeen checks every reader of the session's last change and
	// returns it.
	sessionSeen := func(after time.Time) time.Time {
		t.Helper()
		s, err := st.LoadState(ctx, sid)
		require.NoError(t, err)
		require.False(t, s.UpdatedAt.Before(after), "LoadState's UpdatedAt %v is before the step (%v)", s.UpdatedAt, after)
		require.NotNil(t, s.CheckpointedAt)
		require.True(t, s.UpdatedAt.Equal(*s.CheckpointedAt), "the step's commit is the last change")
		list, err := st.ListSessions(ctx, store.ListSessionsOptions{UserID: "u"})
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.True(t, list[0].UpdatedAt.Equal(s.UpdatedAt), "ListSessions: %v, LoadState: %v", list[0].UpdatedAt, s.UpdatedAt)
		page, err := st.PageSessions(ctx, &store.PageSessionsOptions{UserID: "u"})
		require.NoError(t, err)
		require.Len(t, page.Sessions, 1)
		require.True(t, page.Sessions[0].UpdatedAt.Equal(s.UpdatedAt), "PageSessions: %v, LoadState: %v", page.Sessions[0].UpdatedAt, s.UpdatedAt)
		return s.UpdatedAt
	}
	streamSeen := func(after time.Time) {
		t.Helper()
		info, err := st.GetStreamInfo(ctx, sid)
		require.NoError(t, err)
		require.False(t, info.UpdatedAt.Before(after), "GetStreamInfo's UpdatedAt %v is before the last append (%v)", info.UpdatedAt, after)
	}

	// An append of chunks alone.
	before := dbNow()
	_, err = st.Append(ctx, sid, []store.ChunkWrite{{Chunk: &helix.TextDeltaChunk{Base: helix.Base{AgentID: sid, Step: 1}, Delta: "a"}, RunID: run.RunID}})
	require.NoError(t, err)
	streamSeen(before)
	require.True(t, rawUpdatedAt("streams", "stream_id").Before(before), "an append leaves the stream's updated_at alone")

	commit := func(step int, complete bool, chunks []helix.Chunk) {
		t.Helper()
		_, err := st.CommitStep(ctx, store.StepCommit{SessionID: sid, RunID: run.RunID, Step: step,
			Messages: []helix.Message{helix.AssistantMessage("calling"), helix.ToolResultMessage("c", "t", "ok")},
			Chunks:   chunks, Complete: complete, Output: []byte(`"done"`), StreamID: sid})
		require.NoError(t, err)
	}
	// A step whose commit writes no chunk moves the stream's updated_at
	// itself; one with chunks leaves it to the chunks.
	before = dbNow()
	commit(1, false, nil)
	first := sessionSeen(before)
	streamSeen(before)
	require.True(t, rawUpdatedAt("sessions", "session_id").Before(before), "a step leaves the session's updated_at alone")

	before = dbNow()
	commit(2, true, []helix.Chunk{&helix.TextDeltaChunk{Base: helix.Base{AgentID: sid, Step: 2}, Delta: "b"}})
	require.True(t, sessionSeen(before).After(first), "the second step's commit is the session's last change")
	streamSeen(before)
	s, err := st.LoadState(ctx, sid)
	require.NoError(t, err)
	require.Equal(t, helix.SessionCompleted, s.Status)

	// Retention: the tree's last activity is the last step, not two days
	// ago.
	day, zero := 24*time.Hour, time.Duration(0)
	ids, err := st.SelectGCRoots(ctx, postgres.GCSelection{Completed: &day}, "", 10)
	require.NoError(t, err)
	require.Empty(t, ids, "a session completed by a step just now is not a day old")
	ids, err = st.SelectGCRoots(ctx, postgres.GCSelection{Completed: &zero}, "", 10)
	require.NoError(t, err)
	require.Equal(t, []string{sid}, ids, "with no age kept, the completed session is picked")

	// Any other change still writes updated_at, and is then the last.
	before = dbNow()
	v := "v"
	_, err = st.PatchMetadata(ctx, sid, map[string]*string{"k": &v})
	require.NoError(t, err)
	s, err = st.LoadState(ctx, sid)
	require.NoError(t, err)
	require.False(t, s.UpdatedAt.Before(before))
	require.True(t, s.UpdatedAt.After(*s.CheckpointedAt), "a later change than the step's is the last change")
}

// TestStepCheckpointPointer: a step's commit points its session at its
// checkpoint by ID, and every reader sees the ID: the session
// (LoadState's CheckpointID), the next step (ReadStep), the latest
// checkpoint, a running run's progress (GetRun) and a truncation of
// messages that deletes checkpoints (which moves the pointer to the newest
// left, or none). A checkpoint ID that is not one of the session's own is
// refused, saying why.
func TestStepCheckpointPointer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	const sid = "pointer"
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: sid, AgentType: "x"})
	require.NoError(t, err)
	run, err := st.CreateRun(ctx, store.CreateRunParams{RunID: sid + "-run", SessionID: sid})
	require.NoError(t, err)
	_, err = st.AppendMessages(ctx, sid, []helix.Message{helix.UserMessage("hi")})
	require.NoError(t, err)
	rawPointer := func() *string {
		var p *string
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT checkpoint_id FROM helix.sessions WHERE session_id = $1`, sid).Scan(&p))
		return p
	}
	// seen checks every reader of the session's checkpoint against want.
	seen := func(want string, running bool) {
		t.Helper()
		s, err := st.LoadState(ctx, sid)
		require.NoError(t, err)
		require.Equal(t, want, s.CheckpointID, "LoadState")
		v, err := st.ReadStep(ctx, store.ReadStepParams{SessionID: sid, RunID: run.RunID})
		require.NoError(t, err)
		require.Equal(t, want, v.CheckpointID, "ReadStep")
		if want == "" {
			_, err := st.GetLatestCheckpoint(ctx, sid)
			require.ErrorAs(t, err, new(*helix.NotFoundError), "no checkpoint left")
			return
		}
		cp, err := st.GetLatestCheckpoint(ctx, sid)
		require.NoError(t, err)
		require.Equal(t, want, cp.ID, "GetLatestCheckpoint")
		var seq int64
		if cp.StreamSequence != nil {
			seq = *cp.StreamSequence
		}
		require.Equal(t, seq, v.CheckpointSequence, "ReadStep reads the checkpoint's stream sequence")
		if running {
			r, err := st.GetRun(ctx, run.RunID)
			require.NoError(t, err)
			require.Equal(t, cp.StepCount, r.StepCount, "a running run's progress is its session's checkpoint's")
			require.True(t, r.UpdatedAt.Equal(cp.CreatedAt), "GetRun's UpdatedAt %v, the checkpoint's %v", r.UpdatedAt, cp.CreatedAt)
		}
	}
	seen("", false)

	commit := func(step int) string {
		t.Helper()
		base := helix.Base{AgentID: sid, Step: step}
		res, err := st.CommitStep(ctx, store.StepCommit{SessionID: sid, RunID: run.RunID, Step: step,
			Messages: []helix.Message{helix.AssistantMessage("calling"), helix.ToolResultMessage("c", "t", "ok")},
			Chunks:   []helix.Chunk{&helix.TextDeltaChunk{Base: base, Delta: "a"}}, StreamID: sid})
		require.NoError(t, err)
		require.NotEmpty(t, res.CheckpointID)
		return res.CheckpointID
	}
	first := commit(1)
	require.Equal(t, first, *rawPointer(), "the commit writes its checkpoint's ID into the session row")
	seen(first, true)
	second := commit(2)
	require.Equal(t, second, *rawPointer())
	seen(second, true)

	// A checkpoint saved by hand points the session at its ID; the next
	// step's commit at its own again.
	for _, id := range []string{"saved-by-hand", helix.GenerateCheckpointID("another", 2), helix.GenerateCheckpointID(sid, 2) + "-x"} {
		_, err = st.CreateCheckpoint(ctx, sid, store.CheckpointParams{ID: id, StepCount: 2, MessageCount: -1})
		require.ErrorContains(t, err, fmt.Sprintf("checkpoint ID %q", id), "an ID that is not one of the session's own")
	}
	saved, err := st.CreateCheckpoint(ctx, sid, store.CheckpointParams{ID: helix.GenerateCheckpointID(sid, 2), StepCount: 2, MessageCount: -1})
	require.NoError(t, err)
	require.Equal(t, saved.ID, *rawPointer())
	seen(saved.ID, false)
	third := commit(3)
	seen(third, true)

	// Truncating the messages of the third step deletes its checkpoint:
	// the session points at the newest left (the one saved by hand, which
	// counts 5 messages), then at none.
	require.NoError(t, st.TruncateMessages(ctx, sid, 5))
	seen(saved.ID, false)
	require.NoError(t, st.TruncateMessages(ctx, sid, 0))
	seen("", false)
	require.Nil(t, rawPointer(), "no checkpoint left: no pointer, as before")
}
