package postgres_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// A stream goes with the session that owns it, whether it is the session's
// own or one an app created for it; a stream with another owner, or none,
// stays. A stream cannot be given an owner that does not exist.
func TestStreamsGoWithTheirOwnerSession(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	for _, id := range []string{"p", "q"} {
		_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: id, AgentType: "a"})
		require.NoError(t, err)
	}
	require.NoError(t, st.CreateStream(ctx, "p-side", &store.CreateStreamOptions{OwnerSessionID: "p"}))
	require.NoError(t, st.CreateStream(ctx, "q-side", &store.CreateStreamOptions{OwnerSessionID: "q"}))
	require.NoError(t, st.CreateStream(ctx, "free", nil))
	err := st.CreateStream(ctx, "orphan", &store.CreateStreamOptions{OwnerSessionID: "nobody"})
	var nf *helix.NotFoundError
	require.ErrorAs(t, err, &nf, "an owner that does not exist")
	_, err = st.GetStreamInfo(ctx, "orphan")
	require.ErrorAs(t, err, &nf, "nothing created")

	_, err = st.Pool().Exec(ctx, `DELETE FROM helix.sessions WHERE session_id = 'p'`)
	require.NoError(t, err)
	require.Equal(t, []string{"free", "q", "q-side"}, queryStrings(t, st.Pool(), `SELECT stream_id FROM helix.streams ORDER BY 1`))

	// The streams of a session tree are found through their indexes.
	plan := explainWithoutSeqScans(t, postgres.TreeStreamsSQL, []string{"q"})
	require.Contains(t, plan, "streams_owner_idx", "the tree's streams:\n%s", plan)
	require.NotContains(t, plan, "Seq Scan", "the tree's streams:\n%s", plan)
}
