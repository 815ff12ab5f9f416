package postgres_test

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// pageSeed is a session the page tests insert, and what they expect of it.
type pageSeed struct {
	id, agent, parent, user string
	status                  helix.SessionStatus
	created                 time.Time
}

// seedPageSessions inserts 45 root sessions s-00 ... s-44, three per second
// (the ties are ordered by ID), with agents a/b, statuses completed, failed
// and active, and owners alice, bob and none in turn; roots whose IDs hold
// LIKE's metacharacters (some past ASCII), a second apart after them;
// and sub-agent sessions of alice's s-00 and of bob's s-01, owned on their
// own row by someone else (a sub-session belongs to its root's owner).
func seedPageSessions(t *testing.T, st *postgres.Store, start time.Time) []pageSeed {
	t.Helper()
	var seeds []pageSeed
	statuses := []helix.SessionStatus{helix.SessionCompleted, helix.SessionFailed, helix.SessionActive}
	for i := range 45 {
		seeds = append(seeds, pageSeed{id: fmt.Sprintf("s-%02d", i), agent: []string{"a", "b"}[i%2],
			status: statuses[i%3], user: []string{"alice", "bob", ""}[i%3], created: start.Add(time.Duration(i/3) * time.Second)})
	}
	for i, id := range []string{`x%y-1`, `xay-2`, `x_y-3`, `xby-4`, `x\y-5`, `x\\y-6`, `xé-7`, `xéa-8`,
		`é%-9`, `éa-10`, `é_-11`, `éb-12`} {
		seeds = append(seeds, pageSeed{id: id, agent: "c", status: helix.SessionCompleted, user: "carol",
			created: start.Add(time.Duration(100+i) * time.Second)})
	}
	seeds = append(seeds,
		pageSeed{id: "s-00-sub-1", agent: "child", parent: "s-00", user: "mallory", status: helix.SessionCompleted, created: start.Add(500 * time.Millisecond)},
		pageSeed{id: "s-00-sub-2", agent: "child", parent: "s-00", status: helix.SessionActive, created: start.Add(20 * time.Second)},
		pageSeed{id: "s-01-sub-1", agent: "child", parent: "s-01", user: "alice", status: helix.SessionFailed, created: start.Add(time.Second)},
	)
	for _, s := range seeds {
		root := cmp.Or(s.parent, s.id)
		_, err := st.Pool().Exec(t.Context(), `INSERT INTO helix.sessions (session_id, agent_type, stream_id, parent_session_id, root_session_id,
			status, user_id, created_at) VALUES ($1, $2, $3, nullif($4, ''), $3, $5, nullif($6, ''), $7)`,
			s.id, s.agent, root, s.parent, string(s.status), s.user, s.created)
		require.NoError(t, err)
	}
	return seeds
}

// want lists the seeds keep keeps, newest first, as PageSessions orders
// them (ties by ID, descending; the tied IDs are digits, ordered alike by
// any collation).
func want(seeds []pageSeed, keep func(pageSeed) bool) []string {
	kept := slices.DeleteFunc(slices.Clone(seeds), func(s pageSeed) bool { return !keep(s) })
	slices.SortFunc(kept, func(a, b pageSeed) int {
		return cmp.Or(b.created.Compare(a.created), strings.Compare(b.id, a.id))
	})
	ids := make([]string, len(kept))
	for i, s := range kept {
		ids[i] = s.id
	}
	return ids
}

func ids(page *store.SessionPage) []string {
	out := make([]string, len(page.Sessions))
	for i, s := range page.Sessions {
		out[i] = s.SessionID
	}
	return out
}

// PageSessions pages forward and back by keyset without a gap or a
// repeat, ties in creation time included, under any filter.
func TestPageSessionsBothDirections(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	seeds := seedPageSessions(t, st, start)
	owned := func(user string) func(pageSeed) bool {
		return func(s pageSeed) bool { return s.parent == "" && s.user == user }
	}
	for name, c := range map[string]struct {
		opts store.PageSessionsOptions
		keep func(pageSeed) bool
	}{
		"roots":           {store.PageSessionsOptions{}, func(s pageSeed) bool { return s.parent == "" }},
		"alice's":         {store.PageSessionsOptions{UserID: "alice"}, owned("alice")},
		"agent b":         {store.PageSessionsOptions{AgentType: "b"}, func(s pageSeed) bool { return s.parent == "" && s.agent == "b" }},
		"with sub-agents": {store.PageSessionsOptions{IncludeSubSessions: true}, func(pageSeed) bool { return true }},
	} {
		all := want(seeds, c.keep)
		for _, limit := range []int{1, 4, 7, len(all), len(all) + 1} {
			opts := c.opts
			opts.Limit = limit
			var pages [][]string
			var seen []string
			page, err := st.PageSessions(ctx, &opts)
			require.NoError(t, err)
			require.Nil(t, page.Prev, "%s, %d: the first page has no newer page", name, limit)
			for {
				require.LessOrEqual(t, len(page.Sessions), limit)
				pages = append(pages, ids(page))
				seen = append(seen, ids(page)...)
				if page.Next == nil {
					break
				}
				opts.After, opts.Before = page.Next, nil
				page, err = st.PageSessions(ctx, &opts)
				require.NoError(t, err)
				require.NotNil(t, page.Prev, "%s, %d: a page after another has a newer page", name, limit)
			}
			require.Equal(t, all, seen, "%s, %d: forward", name, limit)
			require.Len(t, pages, max(1, (len(all)+limit-1)/limit), "%s, %d: full pages until the last", name, limit)
			for i := len(pages) - 2; i >= 0; i-- {
				opts.After, opts.Before = nil, page.Prev
				page, err = st.PageSessions(ctx, &opts)
				require.NoError(t, err)
				require.Equal(t, pages[i], ids(page), "%s, %d: page %d, going back", name, limit, i)
				require.NotNil(t, page.Next, "%s, %d: a page reached going back has an older page", name, limit)
			}
			require.Nil(t, page.Prev, "%s, %d: back on the first page", name, limit)
		}
	}

	// The cursor of a page may outlive its row: the next page starts after
	// its position all the same.
	page, err := st.PageSessions(ctx, &store.PageSessionsOptions{Limit: 5})
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `DELETE FROM helix.sessions WHERE session_id = $1`, page.Next.SessionID)
	require.NoError(t, err)
	next, err := st.PageSessions(ctx, &store.PageSessionsOptions{Limit: 5, After: page.Next})
	require.NoError(t, err)
	require.Equal(t, want(seeds, func(s pageSeed) bool { return s.parent == "" })[5:10], ids(next))
}

// PageSessions filters by status, agent, owner, creation time and ID
// prefix, alone and together; a sub-agent session belongs to its root's
// owner; the prefix is literal.
func TestPageSessionsFilters(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	seeds := seedPageSessions(t, st, start)
	at := func(d time.Duration) *time.Time { t := start.Add(d); return &t }
	root := func(s pageSeed) bool { return s.parent == "" }
	ownerOf := func(s pageSeed) string { // a sub-session's owner is its root's
		for _, r := range seeds {
			if r.id == cmp.Or(s.parent, s.id) {
				return r.user
			}
		}
		return ""
	}
	prefixed := func(p string) func(pageSeed) bool {
		return func(s pageSeed) bool { return root(s) && strings.HasPrefix(s.id, p) }
	}
	for name, c := range map[string]struct {
		opts store.PageSessionsOptions
		keep func(pageSeed) bool
	}{
		"status":   {store.PageSessionsOptions{Status: helix.SessionFailed}, func(s pageSeed) bool { return root(s) && s.status == helix.SessionFailed }},
		"agent":    {store.PageSessionsOptions{AgentType: "c"}, func(s pageSeed) bool { return root(s) && s.agent == "c" }},
		"owner":    {store.PageSessionsOptions{UserID: "bob"}, func(s pageSeed) bool { return root(s) && s.user == "bob" }},
		"nobody's": {store.PageSessionsOptions{UserID: "nobody"}, func(pageSeed) bool { return false }},
		"from, inclusive": {store.PageSessionsOptions{CreatedFrom: at(10 * time.Second)},
			func(s pageSeed) bool { return root(s) && !s.created.Before(*at(10 * time.Second)) }},
		"before, exclusive": {store.PageSessionsOptions{CreatedBefore: at(2 * time.Second)},
			func(s pageSeed) bool { return root(s) && s.created.Before(*at(2 * time.Second)) }},
		"a window": {store.PageSessionsOptions{CreatedFrom: at(3 * time.Second), CreatedBefore: at(5 * time.Second)},
			func(s pageSeed) bool {
				return root(s) && !s.created.Before(*at(3 * time.Second)) && s.created.Before(*at(5 * time.Second))
			}},
		"everything at once": {store.PageSessionsOptions{Status: helix.SessionActive, AgentType: "a", UserID: "",
			CreatedFrom: at(0), CreatedBefore: at(10 * time.Second), IDPrefix: "s-"},
			func(s pageSeed) bool {
				return root(s) && s.status == helix.SessionActive && s.agent == "a" && s.created.Before(*at(10 * time.Second))
			}},
		"owner and status": {store.PageSessionsOptions{UserID: "alice", Status: helix.SessionCompleted},
			func(s pageSeed) bool { return root(s) && s.user == "alice" && s.status == helix.SessionCompleted }},

		// The owner of a sub-agent session is its root's, not its own row's.
		"alice's, sub-agents too": {store.PageSessionsOptions{UserID: "alice", IncludeSubSessions: true},
			func(s pageSeed) bool { return ownerOf(s) == "alice" }},
		"mallory's, sub-agents too": {store.PageSessionsOptions{UserID: "mallory", IncludeSubSessions: true},
			func(pageSeed) bool { return false }},
		"sub-agents by status": {store.PageSessionsOptions{IncludeSubSessions: true, Status: helix.SessionFailed},
			func(s pageSeed) bool { return s.status == helix.SessionFailed }},

		// An exact ID is its own prefix; the metacharacters of LIKE match
		// only themselves.
		"exact ID":       {store.PageSessionsOptions{IDPrefix: "s-13"}, prefixed("s-13")},
		"ID prefix":      {store.PageSessionsOptions{IDPrefix: "s-1"}, prefixed("s-1")},
		"prefix with %":  {store.PageSessionsOptions{IDPrefix: "x%"}, prefixed("x%")},
		"prefix with _":  {store.PageSessionsOptions{IDPrefix: "x_"}, prefixed("x_")},
		`prefix with \`:  {store.PageSessionsOptions{IDPrefix: `x\`}, prefixed(`x\`)},
		`prefix with \\`: {store.PageSessionsOptions{IDPrefix: `x\\`}, prefixed(`x\\`)},
		"non-ASCII":      {store.PageSessionsOptions{IDPrefix: "xé"}, prefixed("xé")},
		// Without byte-wise bounds (past ASCII), LIKE alone must keep them
		// literal.
		"non-ASCII with %": {store.PageSessionsOptions{IDPrefix: "é%"}, prefixed("é%")},
		"non-ASCII with _": {store.PageSessionsOptions{IDPrefix: "é_"}, prefixed("é_")},
		"prefix of a sub-agent": {store.PageSessionsOptions{IDPrefix: "s-00", IncludeSubSessions: true},
			func(s pageSeed) bool { return strings.HasPrefix(s.id, "s-00") }},
		"sub-agents are not roots": {store.PageSessionsOptions{IDPrefix: "s-00-"}, func(pageSeed) bool { return false }},
	} {
		c.opts.Limit = store.MaxPageSize
		page, err := st.PageSessions(ctx, &c.opts)
		require.NoError(t, err, name)
		require.Equal(t, want(seeds, c.keep), ids(page), name)
		require.Nil(t, page.Next, name)
		require.Nil(t, page.Prev, name)
	}
	// A row carries the session's summary.
	page, err := st.PageSessions(ctx, &store.PageSessionsOptions{IDPrefix: "s-01-sub-1", IncludeSubSessions: true})
	require.NoError(t, err)
	require.Len(t, page.Sessions, 1)
	got := page.Sessions[0]
	require.Equal(t, store.SessionSummary{SessionID: "s-01-sub-1", AgentType: "child", ParentSessionID: "s-01", Status: helix.SessionFailed,
		UserID: "alice", CreatedAt: got.CreatedAt, UpdatedAt: got.UpdatedAt}, got)
	require.True(t, got.CreatedAt.Equal(start.Add(time.Second)))

	// nil options: the first 50 root sessions.
	page, err = st.PageSessions(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, want(seeds, root)[:store.DefaultSessionPageSize], ids(page))
	require.NotNil(t, page.Next)

	_, err = st.PageSessions(ctx, &store.PageSessionsOptions{After: page.Next, Before: page.Next})
	require.ErrorContains(t, err, "After or Before")
	_, err = st.PageSessions(ctx, &store.PageSessionsOptions{Status: "running"})
	require.ErrorContains(t, err, `unknown status "running"`)
}
