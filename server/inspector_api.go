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

	"github.com/jackc/pgx/v5"

	helix "github.com/helix-agents/helix-dbos"
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

// sessionRow is one session of the inspector's list.
type sessionRow struct {
	SessionID       string              `json:"sessionId"`
	AgentType       string              `json:"agentType"`
	ParentSessionID string              `json:"parentSessionId,omitempty"`
	Status          helix.SessionStatus `json:"status"`
	StepCount       int                 `json:"stepCount"`
	MessageCount    int                 `json:"messageCount"`
	UserID          string              `json:"userId,omitempty"`
	CreatedAt       time.Time           `json:"createdAt"`
	UpdatedAt       time.Time           `json:"updatedAt"`
}

// sessionList answers GET /inspector/api/sessions: one page, newest first,
// with the cursors of the pages after (older) and before (newer) it.
type sessionList struct {
	Sessions   []sessionRow `json:"sessions"`
	NextCursor string       `json:"nextCursor,omitempty"`
	PrevCursor string       `json:"prevCursor,omitempty"`
}

// listQuery is a parsed GET /inspector/api/sessions.
type listQuery struct {
	status    helix.SessionStatus
	agent     string
	principal string
	owner     bool // principal is the caller's own (Authenticate): always applied
	from, to  *time.Time
	search    string
	rootsOnly bool
	limit     int
	cursor    *listCursor
	backward  bool // cursor is the first row of the page after the one wanted
}

// listCursor is a position in the list: the (created_at, session_id) of a
// row, base64url-encoded as RFC 3339 time, a space, and the ID.
type listCursor struct {
	createdAt time.Time
	sessionID string
}

func (c listCursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.createdAt.UTC().Format(time.RFC3339Nano) + " " + c.sessionID))
}

func parseCursor(s string) (*listCursor, error) {
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
	return &listCursor{createdAt: t, sessionID: id}, nil
}

// sessionStatuses are the values of the status filter.
var sessionStatuses = []helix.SessionStatus{helix.SessionActive, helix.SessionCompleted, helix.SessionFailed,
	helix.SessionInterrupted, helix.SessionPaused}

// parseListQuery reads the list's filters and position.
func (s *Server) parseListQuery(r *http.Request) (listQuery, *apiError) {
	v := r.URL.Query()
	q := listQuery{agent: v.Get("agent"), search: v.Get("q"), rootsOnly: true, limit: inspectorPageDefault,
		status: helix.SessionStatus(v.Get("status"))}
	bad := func(format string, args ...any) (listQuery, *apiError) {
		return q, newError(http.StatusBadRequest, CodeInvalidRequest, format, args...)
	}
	if q.status != "" && !slices.Contains(sessionStatuses, q.status) {
		return bad("status must be one of %s, got %q", quoteList(statusNames()), q.status)
	}
	if p, ok := PrincipalFromContext(r.Context()); ok && s.cfg.Authenticate != nil {
		q.principal, q.owner = string(p), true // a caller sees its own sessions, whatever the filter says
	} else {
		q.principal = v.Get("principal")
	}
	for name, dst := range map[string]**time.Time{"from": &q.from, "to": &q.to} {
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
		q.limit = n
	}
	if raw := v.Get("roots"); raw != "" {
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return bad("roots must be true or false, got %q", raw)
		}
		q.rootsOnly = b
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
		q.cursor, q.backward = cur, before != ""
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

// likePrefix is the LIKE pattern of the strings that start with p.
func likePrefix(p string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(p) + "%"
}

// prefixUpperBound is the least string above every string that starts
// with p, byte-wise (text_pattern_ops order): p with its last byte
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

// sql builds the list's query. Only the filters given become conditions,
// so each combination gets a plan for its own index (the indexes of
// migration 00023: roots by (created_at, session_id), by user, by agent,
// and session IDs by prefix).
func (q listQuery) sql() (string, []any) {
	var where []string
	var args []any
	add := func(cond string, vals ...any) {
		for _, v := range vals {
			args = append(args, v)
			cond = strings.Replace(cond, "?", "$"+strconv.Itoa(len(args)), 1)
		}
		where = append(where, cond)
	}
	if q.rootsOnly {
		add("s.parent_session_id IS NULL")
	}
	if q.principal != "" || q.owner {
		if q.rootsOnly {
			add("s.user_id = ?", q.principal)
		} else { // a sub-agent session belongs to its root's owner
			add("EXISTS (SELECT 1 FROM helix.sessions r WHERE r.session_id = s.root_session_id AND r.user_id = ?)", q.principal)
		}
	}
	if q.status != "" {
		add("s.status = ?", string(q.status))
	}
	if q.agent != "" {
		add("s.agent_type = ?", q.agent)
	}
	if q.from != nil {
		add("s.created_at >= ?", *q.from)
	}
	if q.to != nil {
		add("s.created_at < ?", *q.to)
	}
	if q.search != "" {
		add(`s.session_id LIKE ?`, likePrefix(q.search))
		// A LIKE pattern in a parameter does not reach the prefix index in
		// a generic plan (which a prepared statement gets after a few
		// executions); byte-wise bounds do, and imply nothing more.
		if upper, ok := prefixUpperBound(q.search); ok {
			add(`s.session_id ~>=~ ? AND s.session_id ~<~ ?`, q.search, upper)
		}
	}
	order := "DESC"
	if q.cursor != nil {
		op := "<"
		if q.backward {
			op, order = ">", "ASC"
		}
		add("(s.created_at, s.session_id) "+op+" (?, ?)", q.cursor.createdAt, q.cursor.sessionID)
	}
	cond := ""
	if len(where) > 0 {
		cond = "WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, q.limit+1)
	return fmt.Sprintf(`SELECT s.session_id, s.agent_type, coalesce(s.parent_session_id, ''), s.status, s.step_count,
		s.message_count, coalesce(s.user_id, ''), s.created_at, s.updated_at
		FROM helix.sessions s %s ORDER BY s.created_at %s, s.session_id %s LIMIT $%d`, cond, order, order, len(args)), args
}

// handleInspectorSessions lists the caller's sessions for the inspector.
func (s *Server) handleInspectorSessions(w http.ResponseWriter, r *http.Request) *apiError {
	q, apiErr := s.parseListQuery(r)
	if apiErr != nil {
		return apiErr
	}
	query, args := q.sql()
	rows, err := s.eng.Store().Pool().Query(r.Context(), query, args...)
	if err != nil {
		return internalError(fmt.Errorf("inspector: list sessions: %w", err))
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sessionRow, error) {
		var x sessionRow
		var status string
		err := row.Scan(&x.SessionID, &x.AgentType, &x.ParentSessionID, &status, &x.StepCount, &x.MessageCount, &x.UserID,
			&x.CreatedAt, &x.UpdatedAt)
		x.Status = helix.SessionStatus(status)
		return x, err
	})
	if err != nil {
		return internalError(fmt.Errorf("inspector: list sessions: %w", err))
	}
	more := len(list) > q.limit
	if more {
		list = list[:q.limit]
	}
	if q.backward {
		slices.Reverse(list)
	}
	res := sessionList{Sessions: list}
	if len(list) > 0 {
		first, last := list[0], list[len(list)-1]
		// Forward (or the first page): older rows exist when the query
		// found more; newer ones whenever the page was reached by a cursor.
		// Backward: the other way round.
		if (!q.backward && more) || (q.backward && q.cursor != nil) {
			res.NextCursor = listCursor{last.CreatedAt, last.SessionID}.String()
		}
		if (q.backward && more) || (!q.backward && q.cursor != nil) {
			res.PrevCursor = listCursor{first.CreatedAt, first.SessionID}.String()
		}
	}
	if res.Sessions == nil {
		res.Sessions = []sessionRow{}
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
	Children          []treeNode `json:"children"`
	ChildrenTruncated bool       `json:"childrenTruncated,omitempty"`
}

// inspectorTreeMax bounds the sessions of a page's tree (one query each).
const inspectorTreeMax = 200

// treeNode is a sub-session of the tree, with the sessions it started.
type treeNode struct {
	store.SubSessionRef
	Children []treeNode `json:"children"`
}

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
	budget := inspectorTreeMax
	page.Children, err = s.subTree(ctx, id, &budget)
	page.ChildrenTruncated = budget < 0
	return err
}

// subTree reads the sessions a session started, and theirs, while budget
// lasts (it goes below 0 when sessions were left out).
func (s *Server) subTree(ctx context.Context, id string, budget *int) ([]treeNode, error) {
	refs, err := s.eng.SubSessions(ctx, id)
	if err != nil {
		return nil, err
	}
	nodes := make([]treeNode, 0, len(refs))
	for _, r := range refs {
		if *budget--; *budget < 0 {
			break
		}
		children, err := s.subTree(ctx, r.SubSessionID, budget)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, treeNode{SubSessionRef: r, Children: children})
	}
	return nodes, nil
}

// clusterPage answers GET /inspector/api/cluster.
type clusterPage struct {
	Executors []executorRow `json:"executors"`
	Queues    []queueRow    `json:"queues"`
}

// executorRow is one engine of the cluster (a row of helix.executors).
type executorRow struct {
	ExecutorID         string     `json:"executorId"`
	ApplicationVersion string     `json:"applicationVersion"`
	Hostname           string     `json:"hostname,omitempty"`
	PID                int        `json:"pid,omitempty"`
	StartedAt          time.Time  `json:"startedAt"`
	HeartbeatAt        time.Time  `json:"heartbeatAt"`
	LeaseExpiresAt     time.Time  `json:"leaseExpiresAt"`
	Alive              bool       `json:"alive"`
	StoppedAt          *time.Time `json:"stoppedAt,omitempty"`
	TakenOverBy        string     `json:"takenOverBy,omitempty"`
	// SessionsOwned counts the sessions whose current run's workflow is
	// pending under the executor.
	SessionsOwned int `json:"sessionsOwned"`
	// Sessions are the caller's own among them (every one without
	// Authenticate), at most inspectorOwnedMax, by ID.
	Sessions []string `json:"sessions"`
}

// inspectorOwnedMax bounds the sessions listed per executor.
const inspectorOwnedMax = 50

// queueRow is one DBOS queue with work in it.
type queueRow struct {
	Queue   string `json:"queue"`
	Depth   int64  `json:"depth"`
	Running int64  `json:"running"`
	// OldestWaitSeconds is the wait of the oldest workflow waiting for a
	// slot (0 when none waits).
	OldestWaitSeconds float64 `json:"oldestWaitSeconds"`
}

// The cluster's queries. The counts are of the whole cluster: they name no
// session, so every authenticated caller reads them.
const (
	queryInspectorExecutors = `SELECT executor_id, application_version, coalesce(hostname, ''), coalesce(pid, 0), started_at,
		heartbeat_at, heartbeat_at + lease_ms * interval '1 millisecond',
		stopped_at IS NULL AND taken_over_by IS NULL AND now() < heartbeat_at + lease_ms * interval '1 millisecond',
		stopped_at, coalesce(taken_over_by, '')
		FROM helix.executors`
	// Per executor, the sessions whose current run's workflow (the latest
	// run's) is pending under it, and the first inspectorOwnedMax of those
	// the caller may see (%s: the condition on the root session's owner).
	// helix.runs has no index on workflow_id: the join reads it once (about
	// 20 ms for 100k runs).
	queryInspectorOwned = `SELECT w.executor_id, count(DISTINCT r.session_id),
		coalesce((array_agg(DISTINCT r.session_id) FILTER (WHERE %s))[1:%d], '{}')
		FROM dbos.workflow_status w JOIN helix.runs r ON r.workflow_id = w.workflow_uuid
		JOIN helix.sessions s ON s.session_id = r.session_id
		JOIN helix.sessions root ON root.session_id = s.root_session_id
		WHERE w.status = 'PENDING' AND w.executor_id IS NOT NULL
		  AND NOT EXISTS (SELECT 1 FROM helix.runs later WHERE later.session_id = r.session_id AND later.turn > r.turn)
		GROUP BY 1`
	queryInspectorQueues = `SELECT queue_name, count(*) FILTER (WHERE status = 'ENQUEUED'), count(*) FILTER (WHERE status = 'PENDING'),
		coalesce(extract(epoch FROM now()) - min(created_at) FILTER (WHERE status = 'ENQUEUED') / 1000.0, 0)::float8
		FROM dbos.workflow_status WHERE status IN ('ENQUEUED', 'PENDING') AND queue_name IS NOT NULL
		GROUP BY queue_name ORDER BY queue_name`
)

// handleInspectorCluster lists the executors and the queues.
func (s *Server) handleInspectorCluster(w http.ResponseWriter, r *http.Request) *apiError {
	var owner *string
	if p, ok := PrincipalFromContext(r.Context()); ok && s.cfg.Authenticate != nil {
		owner = (*string)(&p)
	}
	page, err := s.readCluster(r.Context(), owner)
	if err != nil {
		return internalError(fmt.Errorf("inspector: cluster: %w", err))
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// readCluster reads the executors and queues; owner, when not nil, limits
// the sessions listed per executor to that principal's.
func (s *Server) readCluster(ctx context.Context, owner *string) (*clusterPage, error) {
	pool := s.eng.Store().Pool()
	rows, err := pool.Query(ctx, queryInspectorExecutors)
	if err != nil {
		return nil, err
	}
	execs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (executorRow, error) {
		var e executorRow
		err := row.Scan(&e.ExecutorID, &e.ApplicationVersion, &e.Hostname, &e.PID, &e.StartedAt, &e.HeartbeatAt,
			&e.LeaseExpiresAt, &e.Alive, &e.StoppedAt, &e.TakenOverBy)
		return e, err
	})
	if err != nil {
		return nil, err
	}
	cond, args := "true", []any{}
	if owner != nil {
		cond, args = "root.user_id = $1", append(args, *owner)
	}
	type owned struct {
		count int
		ids   []string
	}
	byExecutor := map[string]owned{}
	rows, err = pool.Query(ctx, fmt.Sprintf(queryInspectorOwned, cond, inspectorOwnedMax), args...)
	if err != nil {
		return nil, err
	}
	var id string
	var o owned
	if _, err := pgx.ForEachRow(rows, []any{&id, &o.count, &o.ids}, func() error { byExecutor[id] = owned{o.count, slices.Clone(o.ids)}; return nil }); err != nil {
		return nil, err
	}
	for i := range execs {
		o := byExecutor[execs[i].ExecutorID]
		execs[i].SessionsOwned, execs[i].Sessions = o.count, append([]string{}, o.ids...)
	}
	slices.SortFunc(execs, func(a, b executorRow) int {
		if a.Alive != b.Alive {
			if a.Alive {
				return -1
			}
			return 1
		}
		return strings.Compare(a.ExecutorID, b.ExecutorID)
	})
	rows, err = pool.Query(ctx, queryInspectorQueues)
	if err != nil {
		return nil, err
	}
	queues, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (queueRow, error) {
		var q queueRow
		err := row.Scan(&q.Queue, &q.Depth, &q.Running, &q.OldestWaitSeconds)
		return q, err
	})
	if err != nil {
		return nil, err
	}
	if execs == nil {
		execs = []executorRow{}
	}
	if queues == nil {
		queues = []queueRow{}
	}
	return &clusterPage{Executors: execs, Queues: queues}, nil
}
