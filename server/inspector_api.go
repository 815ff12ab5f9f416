package server

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/store"
)

// Page sizes of the inspector's session list.
const (
	inspectorPageDefault = 50
	inspectorPageMax     = 200
	// inspectorTail bounds the messages and checkpoints of a session page:
	// its latest ones (a longer session says how many it left out).
	inspectorTail = store.MaxPageSize
)

// sessionList answers GET /inspector/api/sessions: one page, newest first,
// with the cursors of the pages after (older) and before (newer) it.
type sessionList struct {
	Sessions   []store.SessionSummary `json:"sessions"`
	NextCursor string                 `json:"nextCursor,omitempty"`
	PrevCursor string                 `json:"prevCursor,omitempty"`
}

// encodeCursor renders a position in the list (the created_at and
// session_id of a row) as the API's cursor: base64url of the RFC 3339 time,
// a space, and the ID; "" for none.
func encodeCursor(c *store.SessionCursor) string {
	if c == nil {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(c.CreatedAt.UTC().Format(time.RFC3339Nano) + " " + c.SessionID))
}

// parseCursor reads a cursor encodeCursor wrote.
func parseCursor(s string) (*store.SessionCursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	at, id, ok := strings.Cut(string(raw), " ")
	if !ok {
		return nil, errors.New("no separator")
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return nil, err
	}
	return &store.SessionCursor{CreatedAt: t, SessionID: id}, nil
}

// sessionStatuses are the values of the status filter.
var sessionStatuses = []helix.SessionStatus{helix.SessionActive, helix.SessionCompleted, helix.SessionFailed,
	helix.SessionInterrupted, helix.SessionPaused}

// parseListQuery reads the list's filters and position. An authenticated
// caller lists its own sessions, whatever its principal filter says.
func (s *Server) parseListQuery(r *http.Request) (*store.PageSessionsOptions, *apiError) {
	v := r.URL.Query()
	q := &store.PageSessionsOptions{AgentType: v.Get("agent"), IDPrefix: v.Get("q"), Limit: inspectorPageDefault,
		Status: helix.SessionStatus(v.Get("status"))}
	bad := func(format string, args ...any) (*store.PageSessionsOptions, *apiError) {
		return nil, newError(http.StatusBadRequest, CodeInvalidRequest, format, args...)
	}
	if q.Status != "" && !slices.Contains(sessionStatuses, q.Status) {
		return bad("status must be one of %s, got %q", quoteList(statusNames()), q.Status)
	}
	if p, ok := PrincipalFromContext(r.Context()); ok && s.cfg.Authenticate != nil {
		q.UserID = string(p) // never empty: authenticate refuses an empty principal
	} else {
		q.UserID = v.Get("principal")
	}
	for name, dst := range map[string]**time.Time{"from": &q.CreatedFrom, "to": &q.CreatedBefore} {
		if raw := v.Get(name); raw != "" {
			t, err := time.Parse(time.RFC3339Nano, raw)
			if err != nil {
				return bad("%s must be an RFC 3339 time such as 2026-01-02T15:04:05Z, got %q", name, raw)
			}
			*dst = &t
		}
	}
	if raw := v.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > inspectorPageMax {
			return bad("limit must be 1 to %d, got %q", inspectorPageMax, raw)
		}
		q.Limit = n
	}
	if raw := v.Get("roots"); raw != "" {
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return bad("roots must be true or false, got %q", raw)
		}
		q.IncludeSubSessions = !b
	}
	after, before := v.Get("after"), v.Get("before")
	if after != "" && before != "" {
		return bad("give after or before, not both")
	}
	if c := cmp.Or(after, before); c != "" {
		cur, err := parseCursor(c)
		if err != nil {
			return bad("the page cursor %q is not one this server gave: start from the first page", c)
		}
		if before != "" {
			q.Before = cur
		} else {
			q.After = cur
		}
	}
	return q, nil
}

func statusNames() []string {
	out := make([]string, len(sessionStatuses))
	for i, st := range sessionStatuses {
		out[i] = string(st)
	}
	return out
}

// handleInspectorSessions lists the caller's sessions for the inspector.
func (s *Server) handleInspectorSessions(w http.ResponseWriter, r *http.Request) *apiError {
	q, apiErr := s.parseListQuery(r)
	if apiErr != nil {
		return apiErr
	}
	page, err := s.eng.PageSessions(r.Context(), q)
	if err != nil {
		return internalError(fmt.Errorf("inspector: list sessions: %w", err))
	}
	res := sessionList{Sessions: page.Sessions, NextCursor: encodeCursor(page.Next), PrevCursor: encodeCursor(page.Prev)}
	if res.Sessions == nil {
		res.Sessions = []store.SessionSummary{}
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// sessionPage answers GET /inspector/api/session: what the session page
// shows.
type sessionPage struct {
	// Session is what GET /status?runs=true answers.
	Session  StatusResponse    `json:"session"`
	UserID   string            `json:"userId,omitempty"`
	Tags     []string          `json:"tags,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// Messages are the latest messages (at most inspectorTail), from
	// MessagesOffset; MessagesTotal counts them all.
	Messages       []helix.Message `json:"messages"`
	MessagesOffset int             `json:"messagesOffset"`
	MessagesTotal  int             `json:"messagesTotal"`
	// Checkpoints are the latest checkpoints, oldest first, without their
	// custom state.
	Checkpoints      []checkpointRow `json:"checkpoints"`
	CheckpointsTotal int             `json:"checkpointsTotal"`
	// Children are the sub-agent and companion sessions the session
	// started, each with its own, depth first (at most inspectorTreeMax
	// sessions; ChildrenTruncated says when more were left out).
	Children          []store.SubSessionNode `json:"children"`
	ChildrenTruncated bool                   `json:"childrenTruncated,omitempty"`
}

// inspectorTreeMax bounds the sessions of a page's tree.
const inspectorTreeMax = 200

// checkpointRow is a checkpoint of the session page.
type checkpointRow struct {
	ID           string              `json:"id"`
	RunID        string              `json:"runId,omitempty"`
	StepCount    int                 `json:"stepCount"`
	MessageCount int                 `json:"messageCount"`
	Status       helix.SessionStatus `json:"status"`
	CreatedAt    time.Time           `json:"createdAt"`
}

// handleInspectorSession describes one session for the inspector, under
// the ownership rule of every session route.
func (s *Server) handleInspectorSession(w http.ResponseWriter, r *http.Request) *apiError {
	id := r.URL.Query().Get("sessionId")
	if err := requireSessionID(id); err != nil {
		return err
	}
	st, apiErr := s.session(r.Context(), id)
	if apiErr != nil {
		return apiErr
	}
	ctx := r.Context()
	desc, apiErr := s.describe(ctx, st, true)
	if apiErr != nil {
		return apiErr
	}
	page := sessionPage{Session: desc, UserID: st.UserID, Tags: st.Tags, Metadata: st.Metadata}
	if err := s.pageDetails(ctx, id, &page); err != nil {
		return internalError(fmt.Errorf("inspector: session %s: %w", id, err))
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// pageDetails reads the latest messages and checkpoints and the children
// of a session.
func (s *Server) pageDetails(ctx context.Context, id string, page *sessionPage) error {
	msgs, err := s.eng.Messages(ctx, id, &store.GetMessagesOptions{Limit: inspectorTail})
	if err != nil {
		return err
	}
	if msgs.Total > inspectorTail {
		if msgs, err = s.eng.Messages(ctx, id, &store.GetMessagesOptions{Offset: msgs.Total - inspectorTail, Limit: inspectorTail}); err != nil {
			return err
		}
	}
	page.Messages, page.MessagesOffset, page.MessagesTotal = msgs.Messages, msgs.Offset, msgs.Total
	if page.Messages == nil {
		page.Messages = []helix.Message{}
	}
	cps, err := s.eng.Checkpoints(ctx, id, &store.ListOptions{Limit: inspectorTail})
	if err != nil {
		return err
	}
	if cps.Total > inspectorTail {
		if cps, err = s.eng.Checkpoints(ctx, id, &store.ListOptions{Offset: cps.Total - inspectorTail, Limit: inspectorTail}); err != nil {
			return err
		}
	}
	page.CheckpointsTotal = cps.Total
	page.Checkpoints = make([]checkpointRow, len(cps.Items))
	for i, c := range cps.Items {
		page.Checkpoints[i] = checkpointRow{ID: c.ID, RunID: c.RunID, StepCount: c.StepCount, MessageCount: c.MessageCount,
			Status: c.Status, CreatedAt: c.CreatedAt}
	}
	tree, err := s.eng.SubSessionTree(ctx, id, inspectorTreeMax)
	if err != nil {
		return err
	}
	page.Children, page.ChildrenTruncated = tree.Children, tree.Truncated
	return nil
}

// clusterPage answers GET /inspector/api/cluster: every executor of
// helix.executors, alive ones first, with how many sessions it owns (the
// whole cluster's count: it names no session, so every authenticated
// caller reads it) and the caller's own among them (every one without
// Authenticate); the DBOS queues with work; and the storage format level
// the engines write at (the lowest an alive executor reads) with the
// newest this release writes.
type clusterPage struct {
	Executors         []engine.Executor  `json:"executors"`
	Queues            []engine.QueueLoad `json:"queues"`
	FormatLevel       engine.FormatLevel `json:"formatLevel"`
	NewestFormatLevel engine.FormatLevel `json:"newestFormatLevel"`
}

// inspectorOwnedMax bounds the sessions listed per executor.
const inspectorOwnedMax = 50

// handleInspectorCluster lists the executors and the queues.
func (s *Server) handleInspectorCluster(w http.ResponseWriter, r *http.Request) *apiError {
	opts := &engine.ClusterOptions{SessionsPerExecutor: inspectorOwnedMax}
	if p, ok := PrincipalFromContext(r.Context()); ok && s.cfg.Authenticate != nil {
		opts.UserID = string(p) // never empty: authenticate refuses an empty principal
	}
	c, err := s.eng.Cluster(r.Context(), opts)
	if err != nil {
		return internalError(fmt.Errorf("inspector: cluster: %w", err))
	}
	page := clusterPage{Executors: c.Executors, Queues: c.Queues, FormatLevel: c.FormatLevel, NewestFormatLevel: engine.FormatLevelNewest}
	if page.Executors == nil {
		page.Executors = []engine.Executor{}
	}
	for i := range page.Executors {
		if page.Executors[i].Sessions == nil {
			page.Executors[i].Sessions = []string{}
		}
	}
	if page.Queues == nil {
		page.Queues = []engine.QueueLoad{}
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}
