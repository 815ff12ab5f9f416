package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// addChildren creates sub-agent sessions of parent and records them, in
// order, as the parent's sub-sessions.
func addChildren(t *testing.T, st *postgres.Store, parent string, children ...string) {
	t.Helper()
	refs := make([]store.SubSessionRef, len(children))
	for i, id := range children {
		_, err := st.CreateSession(t.Context(), store.CreateSessionParams{SessionID: id, AgentType: "agent-" + id, ParentSessionID: parent})
		require.NoError(t, err)
		refs[i] = store.SubSessionRef{SubSessionID: id, AgentType: "agent-" + id, ParentToolCallID: "call-" + id}
	}
	// One at a time: the order they were started is the order of the
	// calls, not of the IDs.
	for _, r := range refs {
		require.NoError(t, st.AddSubSessionRefs(t.Context(), parent, []store.SubSessionRef{r}))
	}
}

// readTreeOneByOne reads the tree the way the inspector did before
// SubSessionTree, one query per session: depth first while budget lasts.
func readTreeOneByOne(ctx context.Context, st *postgres.Store, id string, budget *int) ([]store.SubSessionNode, error) {
	refs, err := st.GetSubSessionRefs(ctx, id)
	if err != nil {
		return nil, err
	}
	nodes := []store.SubSessionNode{}
	for _, r := range refs {
		if *budget--; *budget < 0 {
			break
		}
		children, err := readTreeOneByOne(ctx, st, r.SubSessionID, budget)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, store.SubSessionNode{SubSessionRef: r, Children: children})
	}
	return nodes, nil
}

// names renders a tree as "a(a1(a1x) a2) b" for a readable failure.
func names(nodes []store.SubSessionNode) string {
	out := ""
	for i, n := range nodes {
		if i > 0 {
			out += " "
		}
		out += n.SubSessionID
		if len(n.Children) > 0 {
			out += "(" + names(n.Children) + ")"
		}
	}
	return out
}

// SubSessionTree reads the tree in one query: depth first, children in
// the order they were started, cut after limit sessions, exactly what
// reading it session by session gives.
func TestSubSessionTree(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: "lead", AgentType: "lead"})
	require.NoError(t, err)
	addChildren(t, st, "lead", "c", "a", "b") // started in that order
	addChildren(t, st, "a", "a2", "a1")
	addChildren(t, st, "a1", "a1x")
	addChildren(t, st, "a1x", "a1xy")
	addChildren(t, st, "b", "b1", "b2", "b3")
	addChildren(t, st, "b2", "b2a")
	const total = 11

	tree, err := st.SubSessionTree(ctx, "lead", 0)
	require.NoError(t, err)
	require.False(t, tree.Truncated)
	require.Equal(t, "c a(a2 a1(a1x(a1xy))) b(b1 b2(b2a) b3)", names(tree.Children))
	require.Equal(t, store.SubSessionRef{SubSessionID: "c", AgentType: "agent-c", ParentToolCallID: "call-c", Status: helix.SubSessionRunning,
		Mode: helix.SubSessionEphemeral, StartedAt: tree.Children[0].StartedAt}, tree.Children[0].SubSessionRef)
	leaf, err := json.Marshal(tree.Children[0])
	require.NoError(t, err)
	require.Contains(t, string(leaf), `"children":[]`, "a leaf's children encode as []")

	for limit := 1; limit <= total+1; limit++ {
		budget := limit
		expected, err := readTreeOneByOne(ctx, st, "lead", &budget)
		require.NoError(t, err)
		tree, err := st.SubSessionTree(ctx, "lead", limit)
		require.NoError(t, err)
		require.Equal(t, names(expected), names(tree.Children), "limit %d", limit)
		require.Equal(t, expected, tree.Children, "limit %d", limit)
		require.Equal(t, limit < total, tree.Truncated, "limit %d", limit)
	}

	// A subtree; a session without sub-sessions; no session at all.
	tree, err = st.SubSessionTree(ctx, "a", 0)
	require.NoError(t, err)
	require.Equal(t, "a2 a1(a1x(a1xy))", names(tree.Children))
	for _, id := range []string{"c", "no-such-session"} {
		tree, err = st.SubSessionTree(ctx, id, 0)
		require.NoError(t, err)
		require.Equal(t, &store.SubSessionTree{Children: []store.SubSessionNode{}}, tree, id)
	}
}

// A wide tree is cut at the limit without reading past it: the tree of 300
// sub-agents with 3 children each holds the first sessions depth first.
func TestSubSessionTreeWide(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: "wide", AgentType: "lead"})
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `
		INSERT INTO helix.sessions (session_id, agent_type, stream_id, parent_session_id, root_session_id)
		SELECT 'w' || i, 'mid', 'wide', 'wide', 'wide' FROM generate_series(100, 399) i;
		INSERT INTO helix.sub_session_refs (session_id, sub_session_id, agent_type, parent_tool_call_id)
		SELECT 'wide', 'w' || i, 'mid', 'call-' || i FROM generate_series(100, 399) i ORDER BY i;
		INSERT INTO helix.sessions (session_id, agent_type, stream_id, parent_session_id, root_session_id)
		SELECT 'w' || i || '-' || j, 'leaf', 'wide', 'w' || i, 'wide' FROM generate_series(100, 399) i, generate_series(1, 3) j;
		INSERT INTO helix.sub_session_refs (session_id, sub_session_id, agent_type, parent_tool_call_id)
		SELECT 'w' || i, 'w' || i || '-' || j, 'leaf', 'call-' || j FROM generate_series(100, 399) i, generate_series(1, 3) j ORDER BY i, j`)
	require.NoError(t, err)
	tree, err := st.SubSessionTree(ctx, "wide", 200)
	require.NoError(t, err)
	require.True(t, tree.Truncated)
	require.Len(t, tree.Children, 50, "200 sessions: 50 sub-agents with their 3 children each")
	for i, n := range tree.Children {
		require.Equal(t, fmt.Sprintf("w%d", 100+i), n.SubSessionID)
		require.Len(t, n.Children, 3)
	}
	budget := 200
	expected, err := readTreeOneByOne(ctx, st, "wide", &budget)
	require.NoError(t, err)
	require.Equal(t, expected, tree.Children)
}
