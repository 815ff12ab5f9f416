package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/helix-agents/helix-dbos/store"
)

// PageSessions returns one page of sessions, newest first, by keyset on
// (created_at, session_id): a page reads its rows in index order from its
// cursor and stops, at any depth, instead of counting past an OFFSET. The
// indexes of the sessions table serve it: root sessions by (created_at,
// session_id), by owner and by agent, and session IDs by prefix; a status
// by (status, created_at). (The one unindexed case is IncludeSubSessions
// with no other filter: a scan of every session and a top-N sort.)
func (s *Store) PageSessions(ctx context.Context, opts *store.PageSessionsOptions) (*store.SessionPage, error) {
	var o store.PageSessionsOptions
	if opts != nil {
		o = *opts
	}
	switch {
	case o.After != nil && o.Before != nil:
		return nil, errors.New("store: page sessions: give After or Before, not both")
	case o.Status != "" && !o.Status.Valid():
		return nil, fmt.Errorf("store: page sessions: unknown status %q", o.Status)
	}
	limit := pageLimit(o.Limit, store.DefaultSessionPageSize)
	query, args := pageSessionsQuery(&o, limit)
	rows, err := s.q.Query(ctx, query, args...)
	if err != nil {
		return nil, wrap(err, "page sessions")
	}
	list, err := collectSummaries(rows, make([]store.SessionSummary, 0, limit+1))
	if err != nil {
		return nil, wrap(err, "page sessions")
	}
	// The query reads one row more than the page: whether it found one
	// tells whether the list goes on past the page.
	more := len(list) > limit
	if more {
		list = list[:limit]
	}
	backward := o.Before != nil
	if backward {
		slices.Reverse(list) // read oldest first, from the cursor up
	}
	page := &store.SessionPage{Sessions: list}
	if len(list) == 0 {
		return page, nil
	}
	// Forward (or the first page): older rows exist when the query found
	// more; newer ones whenever the page was reached by a cursor. Backward:
	// the other way round.
	first, last := list[0], list[len(list)-1]
	if more || backward {
		page.Next = &store.SessionCursor{CreatedAt: last.CreatedAt, SessionID: last.SessionID}
	}
	if (backward && more) || o.After != nil {
		page.Prev = &store.SessionCursor{CreatedAt: first.CreatedAt, SessionID: first.SessionID}
	}
	return page, nil
}

// pageSessionsQuery builds PageSessions' query, reading limit+1 rows. Only
// the filters given become conditions, so that each combination is planned
// for its own index rather than one generic plan serving none well.
func pageSessionsQuery(o *store.PageSessionsOptions, limit int) (string, []any) {
	var where []string
	var args []any
	add := func(cond string, vals ...any) {
		for _, v := range vals {
			args = append(args, v)
			cond = strings.Replace(cond, "?", "$"+strconv.Itoa(len(args)), 1)
		}
		where = append(where, cond)
	}
	rootsOnly := !o.IncludeSubSessions
	if rootsOnly {
		add("s.parent_session_id IS NULL")
	}
	if o.UserID != "" {
		if rootsOnly {
			add("s.user_id = ?", o.UserID)
		} else { // a sub-agent session belongs to its root's owner
			add("EXISTS (SELECT 1 FROM helix.sessions r WHERE r.session_id = s.root_session_id AND r.user_id = ?)", o.UserID)
		}
	}
	if o.Status != "" {
		add("s.status = ?", string(o.Status))
	}
	if o.AgentType != "" {
		add("s.agent_type = ?", o.AgentType)
	}
	if o.CreatedFrom != nil {
		add("s.created_at >= ?", *o.CreatedFrom)
	}
	if o.CreatedBefore != nil {
		add("s.created_at < ?", *o.CreatedBefore)
	}
	if o.IDPrefix != "" {
		add(`s.session_id LIKE ?`, likePrefix(o.IDPrefix))
		// A LIKE pattern in a parameter does not reach the primary key
		// in a generic plan (which a prepared statement gets after a few
		// executions); bounds do (session_id sorts byte-wise, COLLATE
		// "C"), and imply nothing more.
		if upper, ok := prefixUpperBound(o.IDPrefix); ok {
			add(`s.session_id >= ? AND s.session_id < ?`, o.IDPrefix, upper)
		}
	}
	order := "DESC"
	switch {
	case o.After != nil:
		add("(s.created_at, s.session_id) < (?, ?)", o.After.CreatedAt, o.After.SessionID)
	case o.Before != nil:
		order = "ASC"
		add("(s.created_at, s.session_id) > (?, ?)", o.Before.CreatedAt, o.Before.SessionID)
	}
	cond := ""
	if len(where) > 0 {
		cond = "WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, limit+1)
	return fmt.Sprintf(`SELECT %s FROM helix.sessions s %s ORDER BY s.created_at %s, s.session_id %s LIMIT $%d`,
		summaryColumns, cond, order, order, len(args)), args
}

// likePrefix is the LIKE pattern of the strings that start with p.
func likePrefix(p string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(p) + "%"
}

// prefixUpperBound is the least string above every string that starts
// with p, byte-wise (session_id's order, COLLATE "C"): p with its last byte
// incremented. ok is false unless p is ASCII below DEL, so that the bound
// stays valid UTF-8.
func prefixUpperBound(p string) (string, bool) {
	for i := 0; i < len(p); i++ {
		if p[i] == 0 || p[i] >= 0x7e {
			return "", false
		}
	}
	b := []byte(p)
	b[len(b)-1]++
	return string(b), true
}
