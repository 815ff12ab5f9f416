package helixtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/store"
)

// DefaultTimeout bounds each wait of an [Engine]'s helpers (a result, a
// status, a pending call) unless EngineOptions.Timeout says otherwise.
const DefaultTimeout = 30 * time.Second

// shutdownTimeout bounds a kit engine's Shutdown: a step still running
// then (a tool the test left blocked) is abandoned, as a crash would.
const shutdownTimeout = 500 * time.Millisecond

// TestLease is the executor lease of a kit engine: the shortest the engine
// accepts, so a replacement takes over a dead engine's sessions within
// seconds.
const TestLease = engine.MinExecutorLease

// EngineOptions configure [NewEngine]. The zero value is fine.
type EngineOptions struct {
	// DatabaseURL is the database the engine runs on. Default: a fresh one
	// from [Database]. Give the URL of another engine ([Engine.URL]) to run
	// two engines, or a replacement, on one database.
	DatabaseURL string
	// ExecutorID names the engine in the cluster. Default: unique per
	// engine ("helixtest-<test name>-<n>"). A replacement started with a
	// dead engine's ID resumes its sessions at once; with a new ID it takes
	// them over once the dead engine's lease expired.
	ExecutorID string
	// ExecutorLease defaults to [TestLease].
	ExecutorLease time.Duration
	// Timeout bounds every wait of the helpers; default [DefaultTimeout].
	Timeout time.Duration
	// Queue admits runs through a durable queue (engine.Config.Queue); nil
	// runs them at once.
	Queue *engine.QueueConfig
	// Clock, when set, is the engine's time for the deadlines of calls that
	// wait for people: the test moves it forward ([Clock.Advance]) instead
	// of waiting. nil is the real time. Give a replacement engine the same
	// Clock. Not with Queue.
	Clock *Clock
	// Quiet drops the engine's logs instead of writing them to the test's
	// log (t.Log).
	Quiet bool
	// Configure, when set, adjusts the engine's configuration last.
	Configure func(*engine.Config)
	// CrashAt, when set, crashes the engine the first time a run reaches
	// that point of the loop: see [CrashPoint] and [Engine.AwaitCrash].
	CrashAt *CrashPoint
}

// Engine is a launched engine for one test, with helpers that fail the test
// (t.Fatal) instead of returning errors. It embeds *engine.Engine: every
// method of the engine is available as is. It is shut down at the test's
// cleanup.
type Engine struct {
	*engine.Engine
	t       testing.TB
	url     string
	timeout time.Duration
	opts    EngineOptions
	agents  []*helix.Agent
	crash   *crashState
	down    sync.Once
}

var engineSeq atomic.Int64

// NewEngine starts an engine for t with agents registered (an agent's
// sub-agents are registered with it), on a fresh database unless
// opts.DatabaseURL names one. Its logs go to t.Log; Shutdown runs at t's
// cleanup.
func NewEngine(t testing.TB, opts EngineOptions, agents ...*helix.Agent) *Engine {
	t.Helper()
	url := opts.DatabaseURL
	if url == "" {
		url = Database(t)
	}
	id := opts.ExecutorID
	if id == "" {
		id = fmt.Sprintf("helixtest-%s-%d", executorName(t.Name()), engineSeq.Add(1))
	}
	cfg := engine.Config{DatabaseURL: url, ExecutorID: id, ExecutorLease: opts.ExecutorLease, Queue: opts.Queue,
		ShutdownTimeout: shutdownTimeout}
	if cfg.ExecutorLease == 0 {
		cfg.ExecutorLease = TestLease
	}
	if opts.Clock != nil { // never a nil *Clock in the interface
		cfg.Clock = opts.Clock
	}
	logs := &testLog{t: t}
	if !opts.Quiet {
		l := zerolog.New(logs).With().Timestamp().Str("executor", id).Logger()
		cfg.Logger = &l
	}
	var crash *crashState
	if opts.CrashAt != nil {
		crash = &crashState{point: *opts.CrashAt, reached: make(chan engine.ProbeInfo, 1)}
		cfg.Probe = crash.probe
	}
	if opts.Configure != nil {
		opts.Configure(&cfg)
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	e, err := engine.New(ctx, cfg)
	if err != nil {
		t.Fatalf("helixtest: new engine %s: %v", id, err)
	}
	if err := e.Register(agents...); err != nil {
		t.Fatalf("helixtest: register the agents with engine %s: %v", id, err)
	}
	if err := e.Launch(ctx); err != nil {
		t.Fatalf("helixtest: launch engine %s: %v", id, err)
	}
	ke := &Engine{Engine: e, t: t, url: url, timeout: timeout, opts: opts, agents: agents, crash: crash}
	t.Cleanup(func() {
		switch err := ke.stop(); {
		case errors.Is(err, engine.ErrShutdownTimedOut):
			// The kit's short bound abandons what still runs, as a crash
			// would (a loaded machine can also be slow to close the pool).
			t.Logf("helixtest: engine %s: %v", id, err)
		case err != nil:
			t.Errorf("helixtest: shut engine %s down: %v", id, err)
		}
		logs.close()
	})
	return ke
}

// stop shuts the engine down, once.
func (e *Engine) stop() error {
	var err error
	e.down.Do(func() { err = e.Shutdown(context.Background()) })
	return err
}

// URL is the engine's database: give it to EngineOptions.DatabaseURL to
// start another engine (a replacement) on the same sessions.
func (e *Engine) URL() string { return e.url }

// Timeout is how long the helpers wait.
func (e *Engine) Timeout() time.Duration { return e.timeout }

// context returns a context for one wait of a helper.
func (e *Engine) context() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), e.timeout)
}

// Start runs agent on a new session with message as its user message.
func (e *Engine) Start(agent *helix.Agent, message string) *engine.Handle {
	e.t.Helper()
	return e.Execute(agent, engine.Input{Message: message}, nil)
}

// Execute is engine.Engine.Execute that fails the test on error.
func (e *Engine) Execute(agent *helix.Agent, in engine.Input, opts *engine.ExecuteOptions) *engine.Handle {
	e.t.Helper()
	ctx, cancel := e.context()
	defer cancel()
	h, err := e.Engine.Execute(ctx, agent, in, opts)
	if err != nil {
		e.t.Fatalf("helixtest: execute agent %s: %v", agent.Name, err)
	}
	return h
}

// Result waits for h's run to end or suspend (waiting for an approval or a
// client tool) and returns its outcome, failing the test when it takes
// longer than the engine's timeout.
func (e *Engine) Result(h *engine.Handle) helix.AgentResult {
	e.t.Helper()
	ctx, cancel := e.context()
	defer cancel()
	res, err := h.Result(ctx)
	if err != nil {
		e.t.Fatalf("helixtest: result of session %s, run %s: %v%s", h.SessionID, h.RunID, err, e.hint(err))
	}
	return res
}

// Await waits for h's run to end, through its suspensions (someone else
// answers them), failing the test after the engine's timeout.
func (e *Engine) Await(h *engine.Handle) helix.AgentResult {
	e.t.Helper()
	ctx, cancel := e.context()
	defer cancel()
	res, err := h.Await(ctx)
	if err != nil {
		e.t.Fatalf("helixtest: await session %s, run %s: %v%s", h.SessionID, h.RunID, err, e.hint(err))
	}
	return res
}

func (e *Engine) hint(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf(" (waited %s: EngineOptions.Timeout sets how long)", e.timeout)
	}
	return ""
}

// AwaitStatus waits until the session has status and returns its state,
// failing the test after the engine's timeout with the status it had.
func (e *Engine) AwaitStatus(sessionID string, status helix.SessionStatus) *store.SessionState {
	e.t.Helper()
	var last *store.SessionState
	ok := e.poll(func(ctx context.Context) (bool, error) {
		st, err := e.Session(ctx, sessionID)
		if err != nil {
			return false, err
		}
		last = st
		return st.Status == status, nil
	})
	if !ok {
		got := "no state"
		if last != nil {
			got = string(last.Status)
		}
		e.t.Fatalf("helixtest: session %s did not reach status %s within %s (it is %s)", sessionID, status, e.timeout, got)
	}
	return last
}

// Pending returns the tool calls of the session (and, for a root session,
// of its sub-agents) that wait for an answer now: approvals and client
// tools without a submission.
func (e *Engine) Pending(sessionID string) []store.PendingClientToolCall {
	e.t.Helper()
	ctx, cancel := e.context()
	defer cancel()
	calls, err := e.PendingToolCalls(ctx, sessionID)
	if err != nil {
		e.t.Fatalf("helixtest: pending calls of session %s: %v", sessionID, err)
	}
	out := []store.PendingClientToolCall{}
	for _, c := range calls {
		if c.Submission == nil && c.TimedOutAt == 0 {
			out = append(out, c)
		}
	}
	return out
}

// AwaitPending waits until the session has a call waiting for an answer
// with toolCallID (any call when toolCallID is empty) and returns it.
func (e *Engine) AwaitPending(sessionID, toolCallID string) store.PendingClientToolCall {
	e.t.Helper()
	var found store.PendingClientToolCall
	var waiting []string
	ok := e.poll(func(ctx context.Context) (bool, error) {
		calls, err := e.PendingToolCalls(ctx, sessionID)
		if err != nil {
			return false, err
		}
		waiting = waiting[:0]
		for _, c := range calls {
			if c.Submission != nil || c.TimedOutAt != 0 {
				continue
			}
			waiting = append(waiting, c.ToolCallID)
			if toolCallID == "" || c.ToolCallID == toolCallID {
				found = c
				return true, nil
			}
		}
		return false, nil
	})
	if !ok {
		e.t.Fatalf("helixtest: no call %q waits in session %s after %s (waiting: %s)", toolCallID, sessionID, e.timeout,
			strings.Join(waiting, ", "))
	}
	return found
}

// Approve approves the approval-gated call toolCallID of the session (or
// of one of its sub-agents): the tool runs.
func (e *Engine) Approve(sessionID, toolCallID string) helix.SubmitResult {
	e.t.Helper()
	return e.Submit(sessionID, helix.Approve(toolCallID, ""))
}

// Deny denies the approval-gated call toolCallID: the tool never runs and
// the model sees the refusal, with reason.
func (e *Engine) Deny(sessionID, toolCallID, reason string) helix.SubmitResult {
	e.t.Helper()
	return e.Submit(sessionID, helix.Deny(toolCallID, reason))
}

// Answer submits result (encoded with encoding/json) as the result of the
// client-executed call toolCallID.
func (e *Engine) Answer(sessionID, toolCallID string, result any) helix.SubmitResult {
	e.t.Helper()
	sub, err := helix.ClientToolResult(toolCallID, result)
	if err != nil {
		e.t.Fatalf("helixtest: answer call %s: %v", toolCallID, err)
	}
	return e.Submit(sessionID, sub)
}

// Submit submits sub to the session's root (SubmitToolResult), failing the
// test when it is refused.
func (e *Engine) Submit(sessionID string, sub helix.ToolSubmission) helix.SubmitResult {
	e.t.Helper()
	ctx, cancel := e.context()
	defer cancel()
	root := sessionID
	if st, err := e.Session(ctx, sessionID); err == nil && st.RootSessionID != "" {
		root = st.RootSessionID
	}
	res, err := e.SubmitToolResult(ctx, root, sub)
	if err != nil {
		e.t.Fatalf("helixtest: submit %s for call %s of session %s: %v", sub.Kind, sub.ToolCallID, sessionID, err)
	}
	return res
}

// Messages returns the session's whole transcript.
func (e *Engine) Messages(sessionID string) []helix.Message {
	e.t.Helper()
	ctx, cancel := e.context()
	defer cancel()
	var out []helix.Message
	for offset := 0; ; {
		page, err := e.Engine.Messages(ctx, sessionID, &store.GetMessagesOptions{Offset: offset, Limit: store.MaxPageSize})
		if err != nil {
			e.t.Fatalf("helixtest: messages of session %s: %v", sessionID, err)
		}
		out = append(out, page.Messages...)
		offset += len(page.Messages)
		if !page.HasMore || len(page.Messages) == 0 {
			return out
		}
	}
}

// Stream returns every chunk of the session's stream (its root's stream for
// a sub-agent) written so far, in order.
func (e *Engine) Stream(sessionID string) []store.StoredChunk {
	e.t.Helper()
	ctx, cancel := e.context()
	defer cancel()
	r, err := e.Engine.Stream(ctx, sessionID, 0)
	if err != nil {
		e.t.Fatalf("helixtest: stream of session %s: %v", sessionID, err)
	}
	defer func() { _ = r.Close() }()
	var out []store.StoredChunk
	for after := int64(0); ; {
		page, err := r.Chunks(ctx, after, 500)
		if err != nil {
			e.t.Fatalf("helixtest: stream of session %s: %v", sessionID, err)
		}
		if len(page) == 0 {
			return out
		}
		out = append(out, page...)
		after = page[len(page)-1].Sequence
	}
}

// poll runs check every 10 ms until it reports done (true), an error, or
// the engine's timeout (false).
func (e *Engine) poll(check func(context.Context) (bool, error)) bool {
	e.t.Helper()
	ctx, cancel := e.context()
	defer cancel()
	for {
		done, err := check(ctx)
		if err != nil && ctx.Err() == nil {
			e.t.Fatalf("helixtest: %v", err)
		}
		if done {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// executorName turns a test's name into an executor ID part.
func executorName(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	s := b.String()
	if len(s) > 40 {
		s = s[:40]
	}
	return s
}

// testLog writes an engine's log lines to its test's log until the test's
// cleanup ends (t.Log panics after that).
type testLog struct {
	mu     sync.Mutex
	t      testing.TB
	closed bool
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (l *testLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
}
