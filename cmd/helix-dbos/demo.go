package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgprovision"
	"github.com/helix-agents/helix-dbos/migrations"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// demoDatabase is the database the demo creates on a provisioned server.
const demoDatabase = "helix_demo"

// Demo time limits: generous, so a slow machine still finishes, but a
// demo that is stuck says so instead of hanging.
const (
	demoPhaseTimeout = 2 * time.Minute
	demoWorkerStart  = time.Minute
)

func newDemoCmd(g *globals) *cobra.Command {
	var delay time.Duration
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the demo: provisions Postgres, runs a durable agent, kills it mid-run and recovers it, approves a call from another process, runs a team of agents",
		Long: "Runs with no configuration: finds or starts PostgreSQL (HELIX_DATABASE_URL, a Docker\n" +
			"container, or the local cluster) and creates a database " + demoDatabase + ", or uses --database-url\n" +
			"as it is. Then:\n\n" +
			"  phase 1  a scripted research agent (parallel tools that update its state, then a\n" +
			"           structured output) runs to completion while its live stream is printed;\n" +
			"  phase 2  a worker process (this binary, re-executed) runs the same agent and is killed\n" +
			"           with SIGKILL in the middle of step 2's model call; an engine with the worker's\n" +
			"           executor ID recovers the run, which continues from step 1's checkpoint;\n" +
			"  phase 3  a publisher agent calls " + toolPublishReport + ", a tool that requires approval: the run\n" +
			"           suspends durably (tool_approval_request in the stream); a second process (this\n" +
			"           binary, re-executed as `helix-dbos approve <session> <toolCallId>`) approves it,\n" +
			"           and the same run continues live: the tool runs once and the agent answers;\n" +
			"  phase 4  an editorial lead delegates a check to a sub-agent (a child workflow whose chunks\n" +
			"           stream into the lead's) and consults a persistent companion twice: the second\n" +
			"           consultation continues the companion's session, which remembers the first.\n\n" +
			"Every model call and tool execution is also recorded in helix_demo.executions, outside the\n" +
			"engine, to show that no completed tool ran twice. Exit status 0 means every check passed.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), g, delay)
		},
	}
	cmd.Flags().DurationVar(&delay, "delay", 25*time.Millisecond, "pause between streamed words")
	return cmd
}

// demo is the state of one demo run.
type demo struct {
	g     *globals
	out   io.Writer
	delay time.Duration
	dbURL string
	st    *postgres.Store
	rec   *recorder
	p     *chunkPrinter
	id    string // unique suffix of this run's sessions and executor IDs
}

func (d *demo) phase(format string, args ...any) {
	d.p.endLine()
	fmt.Fprintf(d.out, "==> "+format+"\n", args...)
}

func (d *demo) say(format string, args ...any) {
	d.p.endLine()
	fmt.Fprintf(d.out, "    "+format+"\n", args...)
}

func runDemo(ctx context.Context, out io.Writer, g *globals, delay time.Duration) (err error) {
	start := time.Now()
	d := &demo{g: g, out: out, delay: delay, id: time.Now().UTC().Format("20060102-150405.000")}
	d.id = strings.ReplaceAll(d.id, ".", "-")
	d.p = &chunkPrinter{w: out, prefix: "    ", maxValue: 72, width: 110}

	d.phase("provisioning Postgres")
	inspect := "helix-dbos sessions list --database-url <the same URL>"
	if d.dbURL = g.cfg.DatabaseURL; d.dbURL != "" {
		d.say("using the database given by --database-url / HELIX_DATABASE_URL (%s)", describeDatabase(d.dbURL))
	} else {
		srv, err := pgprovision.Provision(ctx, pgprovision.Options{Logf: d.say})
		if err != nil {
			return err
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = srv.Close(cctx)
		}()
		if d.dbURL, err = createDatabase(ctx, srv.URL, demoDatabase); err != nil {
			return err
		}
		d.say("created database %s", demoDatabase)
		switch srv.Source {
		case pgprovision.SourceLocal:
			// The local cluster outlives the demo; its demo role's
			// password is a fixed development one.
			inspect = fmt.Sprintf("helix-dbos sessions list --database-url '%s'", d.dbURL)
		case pgprovision.SourceContainer:
			inspect = "" // the container is removed when the demo exits
		}
	}
	db, err := sql.Open("pgx", d.dbURL)
	if err != nil {
		return err
	}
	applied, err := migrations.Up(ctx, db)
	_ = db.Close()
	if err != nil {
		return fmt.Errorf("prepare the demo database %s: %w", describeDatabase(d.dbURL), err)
	}
	d.say("helix schema ready (%d new migration(s) applied)", len(applied))
	if d.rec, err = newRecorder(ctx, d.dbURL, true); err != nil {
		return err
	}
	defer d.rec.close()
	st, closeStore, err := openStoreURL(ctx, d.dbURL)
	if err != nil {
		return err
	}
	defer closeStore()
	d.st = st

	if err := d.phase1(ctx); err != nil {
		return fmt.Errorf("phase 1: %w", err)
	}
	sessionID, err := d.phase2(ctx)
	if err != nil {
		return fmt.Errorf("phase 2: %w", err)
	}
	if err := d.summary(ctx, sessionID); err != nil {
		return err
	}
	if err := d.phase3(ctx); err != nil {
		return fmt.Errorf("phase 3: %w", err)
	}
	if err := d.phase4(ctx); err != nil {
		return fmt.Errorf("phase 4: %w", err)
	}
	d.phase("done in %s: all four sessions completed, the crashed one from its last checkpoint, the approved one in place, the team's with its children",
		time.Since(start).Round(100*time.Millisecond))
	if inspect != "" {
		d.say("inspect them: %s", inspect)
	}
	return nil
}

// newEngine starts an engine with the demo agent.
func (d *demo) newEngine(ctx context.Context, executorID string, agent *helix.Agent) (*engine.Engine, func(), error) {
	e, err := engine.New(ctx, engine.Config{DatabaseURL: d.dbURL, ExecutorID: executorID, SkipMigrations: true, Logger: d.g.logger()})
	if err != nil {
		return nil, nil, err
	}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		_ = e.Shutdown(sctx)
	}
	if err := e.Register(agent); err != nil {
		stop()
		return nil, nil, err
	}
	if err := e.Launch(ctx); err != nil {
		stop()
		return nil, nil, err
	}
	return e, stop, nil
}

func (d *demo) phase1(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, demoPhaseTimeout)
	defer cancel()
	sessionID := "demo-" + d.id + "-a"
	d.phase("phase 1: a research agent runs to completion (session %s)", sessionID)
	d.say("agent %s: step 1 calls %s and %s in parallel (both update its custom state),", researchAgentName, toolSearchWeb, toolSearchDocs)
	d.say("step 2 calls %s, step 3 answers through %s with a structured output", toolSaveNote, helix.FinishToolName)
	agent := newResearchAgent(researchOpts{delay: d.delay, rec: d.rec})
	e, stop, err := d.newEngine(ctx, "helix-demo-"+d.id, agent)
	if err != nil {
		return err
	}
	defer stop()
	began := time.Now()
	h, err := e.Execute(ctx, agent,
		engine.Input{Message: researchQuestion}, &engine.ExecuteOptions{SessionID: sessionID})
	if err != nil {
		return err
	}
	d.say("user: %s", researchQuestion)
	d.say("live stream (sequence, chunk type, detail):")
	for c, err := range h.Stream(ctx) {
		if err != nil {
			return err
		}
		d.p.chunk(c)
	}
	res, err := h.Result(ctx)
	if err != nil {
		return err
	}
	if res.Status != helix.AgentCompleted {
		return fmt.Errorf("session %s ended %s: %s", sessionID, res.Status, res.Error)
	}
	s, err := d.st.LoadState(ctx, sessionID)
	if err != nil {
		return err
	}
	d.say("✓ completed in %s: %d steps, %d messages, output delivered through %s",
		time.Since(began).Round(10*time.Millisecond), s.StepCount, s.MessageCount, helix.FinishToolName)
	return nil
}

// worker is the demo's child process.
type worker struct {
	cmd    *exec.Cmd
	stdin  io.Closer
	output syncBuffer
	exited chan struct{}
	err    error // set when exited is closed
}

// startWorker re-executes this binary as `demo-worker`.
func (d *demo) startWorker(sessionID, executorID string) (*worker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program to re-execute it: %w", err)
	}
	args := []string{demoWorkerName, "--session", sessionID, "--executor-id", executorID, "--delay", d.delay.String()}
	if d.g.cfg.Verbose {
		args = append(args, "--verbose")
	}
	w := &worker{cmd: exec.Command(exe, args...), exited: make(chan struct{})}
	// The URL goes through the environment, not the command line, which
	// other users of the machine can read.
	w.cmd.Env = append(os.Environ(), pgprovision.EnvDatabaseURL+"="+d.dbURL)
	w.cmd.Stdout = &w.output
	w.cmd.Stderr = &w.output
	if d.g.cfg.Verbose {
		w.cmd.Stderr = io.MultiWriter(&w.output, os.Stderr)
	}
	if w.stdin, err = w.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := w.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the worker process: %w", err)
	}
	go func() {
		w.err = w.cmd.Wait()
		close(w.exited)
	}()
	return w, nil
}

// kill kills the worker with SIGKILL and waits for it to exit.
func (w *worker) kill() {
	_ = w.cmd.Process.Kill()
	<-w.exited
	_ = w.stdin.Close()
}

// died describes an unexpected exit of the worker.
func (w *worker) died() error {
	out := strings.TrimSpace(w.output.String())
	if out == "" {
		out = "(no output)"
	}
	return fmt.Errorf("the worker process exited unexpectedly (%v); its output:\n%s", w.err, out)
}

func (d *demo) phase2(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, demoPhaseTimeout)
	defer cancel()
	sessionID := "demo-" + d.id + "-b"
	executorID := "helix-demo-worker-" + d.id
	d.phase("phase 2: a worker process runs the agent and is killed mid-run (session %s)", sessionID)
	w, err := d.startWorker(sessionID, executorID)
	if err != nil {
		return "", err
	}
	defer w.kill() // on every path: never leave the worker behind
	d.say("started worker pid %d (DBOS executor ID %s)", w.cmd.Process.Pid, executorID)

	// Until the kill, stop reading as soon as the worker exits on its own.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go func() {
		select {
		case <-w.exited:
			wcancel()
		case <-wctx.Done():
		}
	}()
	failed := func(err error) (string, error) {
		select {
		case <-w.exited:
			return "", w.died()
		default:
			return "", err
		}
	}
	if err := waitSession(wctx, d.st, sessionID); err != nil {
		return failed(err)
	}
	f := &follower{st: d.st, streamID: sessionID, p: d.p}
	defer f.close()
	words := strings.SplitAfter(step2Text, " ")
	half := strings.Join(words[:len(words)/2], "")
	var step1 *helix.StepCommittedChunk
	var step2 strings.Builder
	ended, err := f.follow(wctx, func(c store.StoredChunk) bool {
		switch v := c.Chunk.(type) {
		case *helix.StepCommittedChunk:
			if v.Step == 1 {
				step1 = v
			}
		case *helix.TextDeltaChunk:
			if v.Step == 2 {
				step2.WriteString(v.Delta)
			}
		}
		return step1 != nil && step2.Len() >= len(half)
	})
	if err != nil {
		return failed(err)
	}
	if ended {
		return "", errors.New("the worker's run ended before the crash point")
	}
	pid := w.cmd.Process.Pid
	w.kill()
	d.p.line("💥 killed worker pid %d with SIGKILL in the middle of step 2's model call", pid)

	s, err := d.st.LoadState(ctx, sessionID)
	if err != nil {
		return "", err
	}
	run, err := d.st.GetCurrentRun(ctx, sessionID)
	if err != nil {
		return "", err
	}
	wfStatus, wfExecutor, err := d.st.Diagnostics().WorkflowStatus(ctx, run.WorkflowID)
	if err != nil {
		return "", err
	}
	d.say("Postgres after the crash:")
	d.say("  session %s is %s with %d step committed (checkpoint %s)", sessionID, s.Status, s.StepCount, s.CheckpointID)
	d.say("  workflow %s is %s on executor %s, which no longer runs", run.WorkflowID, wfStatus, wfExecutor)

	d.phase("recovery: an engine with executor ID %s launches in this process (pid %d)", executorID, os.Getpid())
	d.say("DBOS recovers the executor's pending workflow; step 1's model call and tools replay from their checkpoints")
	e, stop, err := d.newEngine(ctx, executorID, newResearchAgent(researchOpts{delay: d.delay, rec: d.rec}))
	if err != nil {
		return "", err
	}
	defer stop()
	if _, err = f.follow(ctx, func(store.StoredChunk) bool { return false }); err != nil {
		return "", err
	}
	if !f.resynced {
		return "", errors.New("check failed: the recovered run emitted no stream_resync chunk")
	}
	h, err := e.Run(ctx, sessionID, "")
	if err != nil {
		return "", err
	}
	res, err := h.Result(ctx)
	if err != nil {
		return "", err
	}
	if res.Status != helix.AgentCompleted {
		return "", fmt.Errorf("the recovered session ended %s: %s", res.Status, res.Error)
	}
	d.say("✓ the recovered run completed (run %s, the same one the worker started)", shortID(h.RunID))
	return sessionID, nil
}

// waitSession waits until the worker has created the session.
func waitSession(ctx context.Context, st *postgres.Store, sessionID string) error {
	ctx, cancel := context.WithTimeout(ctx, demoWorkerStart)
	defer cancel()
	for {
		ok, err := st.SessionExists(ctx, sessionID)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("waiting for the worker to start session %s: %w", sessionID, err)
		}
	}
}

// follower prints a stream across a crash: it keeps its position, and
// re-attaches when a cleanup removed chunks it had not read.
type follower struct {
	st       *postgres.Store
	streamID string
	p        *chunkPrinter
	r        store.Reader
	seq      int64
	resynced bool
}

// follow prints chunks until stop returns true for one (false, nil), the
// stream ends (true, nil) or reading fails.
func (f *follower) follow(ctx context.Context, stop func(store.StoredChunk) bool) (ended bool, err error) {
	for {
		if f.r == nil {
			if f.r, err = f.st.NewReader(ctx, f.streamID, &store.ReaderOptions{FromSequence: f.seq}); err != nil {
				return false, err
			}
		}
		c, err := f.r.Next(ctx)
		var truncated *helix.StreamTruncatedError
		switch {
		case errors.Is(err, io.EOF):
			return true, nil
		case errors.As(err, &truncated):
			f.close()
			continue
		case err != nil:
			return false, err
		}
		f.seq = c.Sequence
		if v, ok := c.Chunk.(*helix.StreamResyncChunk); ok && v.Reason == helix.ResyncCrashRecovery {
			f.resynced = true
		}
		f.p.chunk(c)
		if stop(c) {
			return false, nil
		}
	}
}

func (f *follower) close() {
	if f.r != nil {
		_ = f.r.Close()
		f.r = nil
	}
}

// summary prints the crashed session's result and proves from the
// recorder's table that no completed tool ran twice.
func (d *demo) summary(ctx context.Context, sessionID string) error {
	d.phase("result of the crashed session %s", sessionID)
	s, err := d.st.LoadState(ctx, sessionID)
	if err != nil {
		return err
	}
	runs, err := d.st.ListRuns(ctx, sessionID)
	if err != nil {
		return err
	}
	cps, err := d.st.ListCheckpoints(ctx, sessionID, nil)
	if err != nil {
		return err
	}
	d.say("status        %s after %d steps · %d messages · %d run(s) · %d checkpoints", s.Status, s.StepCount, s.MessageCount, len(runs), cps.Total)
	d.say("output        %s", indentJSON(s.Output, "                  "))
	d.say("custom state  %s", indentJSON(s.CustomState, "                  "))

	xs, err := d.rec.executions(ctx, sessionID)
	if err != nil {
		return err
	}
	self := os.Getpid()
	who := func(pid int) string {
		if pid == self {
			return "recovery"
		}
		return "worker"
	}
	type tally struct {
		name  string
		step  int
		count int
		by    []string
	}
	var models, tools []*tally
	byKey := map[string]*tally{}
	for _, x := range xs {
		key := x.Kind + "/" + x.Name + "/" + x.Key
		t := byKey[key]
		if t == nil {
			t = &tally{name: x.Name, step: x.Step}
			byKey[key] = t
			if x.Kind == "model" {
				models = append(models, t)
			} else {
				tools = append(tools, t)
			}
		}
		t.count++
		t.by = append(t.by, who(x.PID))
	}
	line := func(ts []*tally) string {
		parts := make([]string, len(ts))
		for i, t := range ts {
			parts[i] = fmt.Sprintf("%s ×%d (%s)", t.name, t.count, strings.Join(t.by, ", "))
		}
		return strings.Join(parts, " · ")
	}
	d.say("model calls   %s", line(models))
	d.say("tool runs     %s", line(tools))

	// The checks behind exit status 0.
	var problems []string
	if s.Status != helix.SessionCompleted || s.StepCount != 3 {
		problems = append(problems, fmt.Sprintf("the session is %s after %d steps, want completed after 3", s.Status, s.StepCount))
	}
	var st researchState
	if err := json.Unmarshal(s.CustomState, &st); err != nil || len(st.Sources) != 3 || len(st.Notes) != 1 {
		problems = append(problems, fmt.Sprintf("custom state %s: want 3 sources and 1 note", s.CustomState))
	}
	names := make([]string, 0, len(tools))
	for _, t := range tools {
		names = append(names, t.name)
		if t.count != 1 {
			problems = append(problems, fmt.Sprintf("tool %s ran %d times", t.name, t.count))
		}
	}
	slices.Sort(names)
	if want := []string{toolSaveNote, toolSearchDocs, toolSearchWeb}; !slices.Equal(names, want) {
		problems = append(problems, fmt.Sprintf("tools run: %v, want %v", names, want))
	}
	retried := false
	for _, m := range models {
		if m.step == 2 && m.count >= 2 {
			retried = true
		}
	}
	if !retried {
		problems = append(problems, "step 2's model call was not re-run after the crash")
	}
	if len(problems) > 0 {
		return fmt.Errorf("demo check failed: %s", strings.Join(problems, "; "))
	}
	d.say("✓ each tool ran exactly once: the tools of committed step 1 were not run again after the crash;")
	d.say("  only the interrupted model call of step 2 ran twice, and its lost chunks were replaced (stream_resync)")
	return nil
}

func indentJSON(raw json.RawMessage, indent string) string {
	var b bytes.Buffer
	if json.Indent(&b, raw, indent, "  ") != nil {
		return string(raw)
	}
	return b.String()
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a child
// process's stdout and stderr.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// createDatabase (re)creates a database on a server and returns its URL.
func createDatabase(ctx context.Context, serverURL, name string) (string, error) {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := postgres.RecreateDatabase(ctx, postgres.PgxQuerier(conn), name); err != nil {
		return "", err
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}
