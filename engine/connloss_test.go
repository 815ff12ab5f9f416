package engine_test

import (
	"context"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// cutProxy forwards 127.0.0.1 connections to a Postgres server and can cut
// them all at once, the way a restart, a failover or a load balancer cuts
// them: the client reads an end of stream, with no error message from the
// server first.
type cutProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	down    bool
	refused int
	// loss, when set, loses one acknowledgement (ackLoss).
	loss *ackLoss
}

// newCutProxy starts a proxy to the server of dbURL and returns it with
// dbURL rewritten to go through it. It stops at the end of the test.
func newCutProxy(t *testing.T, dbURL string) (*cutProxy, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln, target: u.Host, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		p.wg.Wait()
	})
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.refused++
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.mu.Unlock()
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, s, c)
		go p.pipe(s, c, c)
	}
}

// pipe copies one direction of client's connection; either side failing
// closes both.
func (p *cutProxy) pipe(dst, src, client net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	loss := p.loss
	p.mu.Unlock()
	if loss != nil {
		loss.copy(dst, src, client)
	} else {
		_, _ = io.Copy(dst, src)
	}
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
	_ = dst.Close()
	_ = src.Close()
}

// cut closes every connection (a FIN to the client, as from a stopped
// server's proxy). New connections are accepted unless the proxy is down.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// ackLoss makes a cutProxy lose the acknowledgement of one transaction:
// after a client's message holding arm, the connection is cut as soon as
// the server's answer holds a COMMIT's completion (or ack's, newAckLossOn),
// which the client never reads. The server committed; the client saw its
// connection end.
type ackLoss struct {
	arm  string
	ack  string
	lost chan struct{}
	// then, when set, runs once the connection was cut (an outage that
	// begins with the loss).
	then func()

	mu    sync.Mutex
	armed net.Conn
	done  bool
}

func newAckLoss(arm string) *ackLoss { return newAckLossOn(arm, "COMMIT\x00") }

// newAckLossOn is newAckLoss of a statement in an implicit transaction,
// whose answer's completion tag is ack ("SELECT 1\x00"): the server sends
// it with the commit's ReadyForQuery, at the Sync the client sent with it.
func newAckLossOn(arm, ack string) *ackLoss {
	return &ackLoss{arm: arm, ack: ack, lost: make(chan struct{})}
}

// copy copies src to dst, one read at a time, watching both directions of
// client's connection.
func (l *ackLoss) copy(dst, src, client net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			data := buf[:n]
			l.mu.Lock()
			switch {
			case l.done:
			case src == client && strings.Contains(string(data), l.arm):
				l.armed = client
			case src != client && l.armed == client && strings.Contains(string(data), l.ack):
				l.done = true
				close(l.lost)
				l.mu.Unlock()
				if l.then != nil {
					l.then()
				}
				return // the caller closes both sides
			}
			l.mu.Unlock()
			if _, err := dst.Write(data); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// goDown makes the server unreachable through the proxy: new connections
// are refused, the open ones cut (setDown(false) brings it back).
func (p *cutProxy) goDown() {
	p.setDown(true)
	p.cut()
}

// setDown makes the proxy close new connections at once (the server is
// unreachable) or accept them again.
func (p *cutProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
}

// awaitBlocked waits until a backend of the database runs a statement
// matching pattern (SQL LIKE) and waits for a lock.
func awaitBlocked(t *testing.T, direct *pgx.Conn, pattern string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var waiting bool
		err := direct.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1)`,
			pattern).Scan(&waiting)
		require.NoError(t, err)
		if waiting {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no statement like %q waited for a lock; the database's backends:\n%s", pattern, backends(t, direct))
		case <-tick.C:
		}
	}
}

// backends describes the other backends of the database, for a failure
// message.
func backends(t *testing.T, direct *pgx.Conn) string {
	t.Helper()
	rows, err := direct.Query(context.WithoutCancel(t.Context()), `SELECT pid || ' ' || state || ' ' || coalesce(wait_event_type, '-') || ' blocked by ' || pg_blocking_pids(pid)::text || ': ' || left(query, 300)
		FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}

// connLossEngine starts an engine that reaches its database through a
// cutting proxy, with its logs in buf.
func connLossEngine(t *testing.T, dbURL string, buf *syncBuffer, agents ...*helix.Agent) (*engine.Engine, *cutProxy) {
	t.Helper()
	p, proxied := newCutProxy(t, dbURL)
	return newEngineLogging(t, proxied, buf, agents...), p
}

// requireNoStepFailed checks no run was failed by the lost connection.
func requireNoStepFailed(t *testing.T, buf *syncBuffer) {
	t.Helper()
	for line := range strings.SplitSeq(buf.String(), "\n") {
		require.NotContains(t, line, `"run.step_failed"`, "a lost connection is not a step outcome")
	}
}

// A connection cut while DBOS starts a sub-agent's child workflow (its
// status insert in flight) is retried once the database answers: the
// parent's run goes on and the child runs once.
func TestConnectionCutWhileStartingAChildWorkflow(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	var buf syncBuffer
	var mu sync.Mutex
	var children []string
	sum := summarizer(func(s string) { mu.Lock(); children = append(children, s); mu.Unlock() })
	reached, proceed := make(chan struct{}), make(chan struct{})
	parent := &helix.Agent{
		Name:  "lead",
		Tools: []*helix.Tool{helix.MustSubAgentTool(sum, nil, nil)},
		Model: script(
			func(req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
				reached <- struct{}{}
				<-proceed
				return calls(call("s1", "subagent__summarizer", `{"task":"alpha"}`))(req, cb)
			},
			text("summarized"),
		),
	}
	e, p := connLossEngine(t, dbURL, &buf, parent, sum)
	h, err := e.Execute(t.Context(), parent, engine.Input{Message: "summarize alpha"}, nil)
	require.NoError(t, err)

	direct, err := pgx.Connect(t.Context(), dbURL)
	require.NoError(t, err)
	defer func() { _ = direct.Close(context.WithoutCancel(t.Context())) }()
	<-reached
	holder, err := pgx.Connect(t.Context(), dbURL)
	require.NoError(t, err)
	defer func() { _ = holder.Close(context.WithoutCancel(t.Context())) }()
	lock, err := holder.Begin(t.Context())
	require.NoError(t, err)
	_, err = lock.Exec(t.Context(), `LOCK TABLE dbos.workflow_status IN SHARE MODE`) // holds back inserts
	require.NoError(t, err)
	close(proceed)
	awaitBlocked(t, direct, `%INSERT INTO "dbos".workflow_status%`)
	p.cut()
	require.NoError(t, lock.Rollback(t.Context()))

	res := result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	msgs := allMessages(t, e, h.SessionID)
	require.Equal(t, []string{"user", "assistant", "tool", "assistant"}, roles(msgs))
	require.JSONEq(t, `{"summary":"short alpha"}`, msgs[2].Content)
	mu.Lock()
	require.Equal(t, []string{"start:" + h.SessionID + "-sub-s1", "complete:" + h.SessionID + "-sub-s1"}, children,
		"the child ran once")
	mu.Unlock()
	requireNoStepFailed(t, &buf)
}

// A connection cut while a recovering engine reads its workflow's recorded
// steps (the step journal, read once before the first step) is retried: the session
// replays, waits for its approval as before, and completes once approved.
func TestConnectionCutWhileReplayingARecordedStep(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	var runs sync.Map
	agent := payer(&runs)
	const id = "connloss-replayer"
	first := newEngineWithID(t, dbURL, id, agent)
	h, err := first.Execute(t.Context(), agent, engine.Input{Message: "pay"}, nil)
	require.NoError(t, err)
	first0 := result(t, h) // suspended for the approval
	require.Equal(t, helix.AgentSuspendedClientTool, first0.Status)
	require.NoError(t, first.Shutdown(t.Context()))

	var buf syncBuffer
	p, proxied := newCutProxy(t, dbURL)
	log := zerolog.New(&buf)
	second, err := engine.New(t.Context(), engine.Config{DatabaseURL: proxied, ExecutorID: id, Logger: &log})
	require.NoError(t, err)
	require.NoError(t, second.Register(agent))
	t.Cleanup(func() { require.NoError(t, second.Shutdown(context.Background())) })

	direct, err := pgx.Connect(t.Context(), dbURL)
	require.NoError(t, err)
	defer func() { _ = direct.Close(context.WithoutCancel(t.Context())) }()
	holder, err := pgx.Connect(t.Context(), dbURL)
	require.NoError(t, err)
	defer func() { _ = holder.Close(context.WithoutCancel(t.Context())) }()
	lock, err := holder.Begin(t.Context())
	require.NoError(t, err)
	_, err = lock.Exec(t.Context(), `LOCK TABLE helix.step_journal IN ACCESS EXCLUSIVE MODE`) // holds back reads
	require.NoError(t, err)
	// Launch re-enqueues the session's workflow and returns; the workflow's
	// replay then waits on the lock, and only its connection is busy when
	// the cut comes.
	require.NoError(t, second.Launch(t.Context()))
	awaitBlocked(t, direct, "%LEFT JOIN helix.step_journal%")
	p.cut()
	require.NoError(t, lock.Rollback(t.Context()))

	h2, err := second.Run(t.Context(), h.SessionID, h.RunID)
	require.NoError(t, err)
	submit(t, second, h.SessionID, helix.Approve("t1", "fine"))
	res := result(t, h2)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.EqualValues(t, 1, executions2(&runs, "t1"))
	requireNoStepFailed(t, &buf)
}

// A connection lost while a workflow reads, at its start and before its
// journal, whether its run was aborted (Env.Revive) is waited out. The
// outage's error used to end the workflow failed in DBOS, its run left
// running with nothing to run it (the chaos suite's chaos-lead-057: a
// queued run's driver started during a Postgres restart).
func TestConnectionLostWhileAWorkflowReadsWhetherItsRunWasAborted(t *testing.T) {
	t.Parallel()
	agent := &helix.Agent{Name: "greeter", Model: script(text("hello"))}
	loss := newAckLossOn("coalesce(error_code, ''), coalesce(workflow_id, '')", "SELECT 1\x00")
	runLosingAnAckLogged(t, pgtest.NewURL(t), loss, agent, "workflow.outage_retry")
}

// outage is how long TestSessionWaitsOutADatabaseOutage cuts the database
// off: longer than a step's retries (steps.InfraRetries, with DBOS's
// backoff about three seconds).
const outage = 5 * time.Second

// A database outage longer than a step's retries does not fail the
// session: the outage starts inside the second model step (its
// onStepStart hook), whose stream writes, checkpoint and commit wait for
// the database; the session completes once it is back.
func TestSessionWaitsOutADatabaseOutage(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	var buf syncBuffer
	reached, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	agent := &helix.Agent{
		Name:  "writer",
		Tools: []*helix.Tool{noteTool(&executions{})},
		Model: script(calls(call("n1", "note", `{"text":"x"}`)), text("written through the outage")),
		Hooks: &helix.Hooks{OnStepStart: func(_ context.Context, hc helix.HookContext) error {
			if hc.Step == 2 {
				once.Do(func() { reached <- struct{}{}; <-proceed })
			}
			return nil
		}},
	}
	e, p := connLossEngine(t, dbURL, &buf, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "write"}, nil)
	require.NoError(t, err)
	<-reached
	p.goDown()
	close(proceed)
	<-time.After(outage) // the scenario's input, not a wait for a condition
	p.setDown(false)

	res := result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.Equal(t, []string{"user", "assistant", "tool", "assistant"}, roles(allMessages(t, e, h.SessionID)))
	requireNoStepFailed(t, &buf)
}

// A model step whose stream write failed after some of its deltas were
// written (the database unreachable for longer than the stream's retry
// timeout) runs again once the database is back, however long the outage
// (it used to fail the run after the step's retries, about three seconds),
// and the retry removes what the failed attempt wrote (stream_resync)
// instead of writing it a second time. The retry used to skip that check
// when the step knew its message count from the run's previous commit (the
// chaos suite saw a step's deltas twice).
func TestModelStepRetriedAfterAFailedStreamWriteRepeatsNoChunk(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	var buf syncBuffer
	written, proceed := make(chan struct{}), make(chan struct{})
	var attempts atomic.Int32
	agent := &helix.Agent{
		Name:  "writer",
		Tools: []*helix.Tool{noteTool(&executions{})},
		Model: script(calls(call("n1", "note", `{"text":"x"}`)), func(_ helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
			cb.TextDelta("first ")
			if attempts.Add(1) == 1 {
				written <- struct{}{}
				<-proceed
			}
			cb.TextDelta("second")
			return helix.StepResult{Type: helix.StepText, Content: "first second", StopReason: helix.StopEndTurn}, nil
		}),
	}
	p, proxied := newCutProxy(t, dbURL)
	logger := zerolog.New(&buf)
	e := newEngineWith(t, engine.Config{DatabaseURL: proxied, Logger: &logger,
		StoreOptions: []postgres.Option{postgres.WithRetryTimeout(200 * time.Millisecond)}}, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "write"}, nil)
	require.NoError(t, err)
	direct, err := pgx.Connect(t.Context(), dbURL)
	require.NoError(t, err)
	defer func() { _ = direct.Close(context.WithoutCancel(t.Context())) }()
	<-written
	awaitRow(t, direct, `SELECT EXISTS (SELECT 1 FROM helix.stream_chunks WHERE step = 2)`) // step_start and the first delta
	p.goDown()
	close(proceed)
	<-time.After(outage) // the scenario's input (longer than the 200 ms retry timeout and the step's retries), not a wait for a condition
	p.setDown(false)

	res := result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.Greater(t, attempts.Load(), int32(1), "the step ran again: the test tested something")
	chunks := streamChunks(t, h)
	var deltas []string
	for _, d := range findChunks[*helix.TextDeltaChunk](chunks) {
		deltas = append(deltas, d.Delta)
	}
	require.Equal(t, []string{"first ", "second"}, deltas, "each delta once")
	require.Len(t, findChunks[*helix.StreamResyncChunk](chunks), 1, "the retry removed the failed attempt's chunks")
	requireNoStepFailed(t, &buf)
}

// awaitRow waits until query (one boolean) answers true.
func awaitRow(t *testing.T, direct *pgx.Conn, query string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var ok bool
		require.NoError(t, direct.QueryRow(t.Context(), query).Scan(&ok))
		return ok
	}, 30*time.Second, 10*time.Millisecond, "%s never answered true", query)
}

// runLosingAnAck runs agent to completion on an engine whose connections
// go through a proxy that loses the acknowledgement loss waits for, and
// checks that one was lost and that the journal retried: it returns the
// engine, the run's handle and the engine's log.
func runLosingAnAck(t *testing.T, dbURL string, loss *ackLoss, agent *helix.Agent) (*engine.Engine, *engine.Handle, *syncBuffer) {
	t.Helper()
	return runLosingAnAckLogged(t, dbURL, loss, agent, "journal.retry")
}

// runLosingAnAckLogged is runLosingAnAck with the event of the retry
// that the engine's log must hold.
func runLosingAnAckLogged(t *testing.T, dbURL string, loss *ackLoss, agent *helix.Agent, event string) (*engine.Engine, *engine.Handle, *syncBuffer) {
	t.Helper()
	buf := &syncBuffer{}
	p, proxied := newCutProxy(t, dbURL)
	p.mu.Lock()
	p.loss = loss
	p.mu.Unlock()
	e := newEngineLogging(t, proxied, buf, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	select {
	case <-loss.lost:
	default:
		t.Fatal("no acknowledgement was lost: the test did not test anything")
	}
	require.Contains(t, buf.String(), `"event":"`+event+`"`, "the engine retried the statement whose answer was lost")
	return e, h, buf
}
