package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgprovision"
)

// The load test starts `serve` replicas of this binary against a fake
// OpenAI-compatible provider it runs itself, sends POST /start requests at
// a uniform rate, waits for every session to end and reports the start
// delay (admission), the end-to-end time, the throughput, what the
// provider saw of the rate limit and the replicas' memory. Everything
// listens on 127.0.0.1.

// Settings of the load test that are not flags.
const (
	// loadtestDatabase is the database the load test creates on a
	// provisioned server.
	loadtestDatabase = "helix_loadtest"
	// loadtestAgent is the one agent of the generated agent file.
	loadtestAgent = "chat"
	// loadtestWorkers bounds the /start requests in flight.
	loadtestWorkers = 64
	// loadtestPoll is how often the database is polled for progress.
	loadtestPoll = 200 * time.Millisecond
	// loadtestReadyTimeout bounds a replica's start, migrations included.
	loadtestReadyTimeout = 2 * time.Minute
	// loadtestStopTimeout bounds a replica's graceful stop (serve's own
	// shutdown timeout is 15s) before it is killed.
	loadtestStopTimeout = 30 * time.Second
	// loadtestRequestTimeout bounds one POST /start.
	loadtestRequestTimeout = 30 * time.Second
	// loadtestMaxSessions bounds --sessions: the load test keeps every
	// request and model call in memory.
	loadtestMaxSessions = 1_000_000
	// loadtestMaxReplicas bounds --replicas.
	loadtestMaxReplicas = 32
	// loadtestErrorSamples is how many failed /start bodies are reported.
	loadtestErrorSamples = 5
	// loadtestOutputTail is how much of a replica's output is kept.
	loadtestOutputTail = 64 << 10
	// loadtestModel is the model name the fake provider answers as.
	loadtestModel = "fake"
)

// loadtestFlags are the flags of `loadtest`.
type loadtestFlags struct {
	sessions, replicas, queueConcurrency, partitionWorkerConcurrency int
	duration, pollingInterval, modelLatency, timeout                 time.Duration
	tenants, queue, rateLimit, queueRateLimit                        string
	asJSON                                                           bool
}

// newLoadtestCmd returns the `loadtest` command.
func newLoadtestCmd(g *globals) *cobra.Command {
	var f loadtestFlags
	cmd := &cobra.Command{
		Use:   "loadtest",
		Short: "Load-test serve replicas of this binary with a fake model provider (loopback only)",
		Long: "Starts --replicas `serve` processes of this binary on 127.0.0.1, with one bearer token per\n" +
			"tenant, behind an in-process OpenAI-compatible fake provider that answers after --model-latency\n" +
			"(and answers 429 beyond --rate-limit). Sends --sessions POST /start requests spread uniformly over\n" +
			"--duration, round-robin across the replicas, waits until every session completed or failed, and\n" +
			"reports per tenant the start delay (the provider's first call minus the /start send time) and\n" +
			"the end-to-end time, the throughput, the most model calls in any rate-limit period and the 429s,\n" +
			"and each replica's peak and final RSS.\n\n" +
			"With --database-url (or HELIX_DATABASE_URL) it uses that database as it is: give it a scratch\n" +
			"database. Without, it provisions Postgres like `bench` and recreates a database " + loadtestDatabase + ".\n" +
			"Progress goes to stderr, the report to stdout.",
		Example: "  helix-dbos loadtest\n" +
			"  helix-dbos loadtest --queue off --sessions 500 --duration 5s\n" +
			"  helix-dbos loadtest --rate-limit 150/1s --json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLoadtest(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), g, f, cmd.Flags().Changed)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.sessions, "sessions", 2000, "sessions to start (one POST /start each)")
	fl.DurationVar(&f.duration, "duration", 10*time.Second, "the starts are spread uniformly over this time (0: all at once)")
	fl.IntVar(&f.replicas, "replicas", 2, "serve processes")
	fl.StringVar(&f.tenants, "tenants", "big:90,small:10", "tenants as NAME:PERCENT,... (percents sum to 100); each is a principal with its own token")
	fl.StringVar(&f.queue, "queue", engine.DefaultQueueName, "the replicas' admission queue, or "+queueOff+" for direct mode")
	fl.IntVar(&f.queueConcurrency, "queue-concurrency", engine.DefaultWorkerConcurrency, "queued sessions each replica runs at once")
	fl.IntVar(&f.partitionWorkerConcurrency, "partition-worker-concurrency", 0, "sessions of one tenant each replica runs at once (0: --queue-concurrency)")
	fl.DurationVar(&f.pollingInterval, "queue-polling-interval", 0, "how often each replica polls the queue (0: serve's default)")
	fl.DurationVar(&f.modelLatency, "model-latency", 200*time.Millisecond, "the fake model's time per call")
	fl.StringVar(&f.rateLimit, "rate-limit", "", "N/PERIOD (150/1s): the provider answers 429 beyond it (and the queue gets it unless --queue-rate-limit)")
	fl.StringVar(&f.queueRateLimit, "queue-rate-limit", "", "the replicas' --queue-rate-limit as N/PERIOD (default --rate-limit): "+
		"a limit below the provider's leaves headroom for the jitter between a dequeue and its model call")
	fl.DurationVar(&f.timeout, "timeout", 5*time.Minute, "how long the starts and every session's end may take")
	fl.BoolVar(&f.asJSON, "json", false, "print the report as JSON")
	return cmd
}

// loadTenant is one tenant: a serve principal with its own token.
type loadTenant struct {
	name    string
	percent int
	secret  string
}

// loadPlan is the validated configuration of a load test.
type loadPlan struct {
	flags       loadtestFlags
	tenants     []loadTenant
	queued      bool
	limit       int           // rate limit calls, 0 for none
	period      time.Duration // rate limit period
	sessions    []plannedStart
	tenantSpecs string // --tenants as given, for the report
}

// plannedStart is one POST /start of the plan.
type plannedStart struct {
	id      string
	tenant  int           // index in loadPlan.tenants
	replica int           // index of the replica it is sent to
	at      time.Duration // offset of its send time from the first start
}

// tenantNameRE is what a tenant name may be: usable in a session ID and as
// a principal before the colon of NAME:SECRET.
var tenantNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$`)

// loadQueueNameRE mirrors the engine's queue name rule (engine.QueueConfig)
// so a bad --queue fails before any process starts.
var loadQueueNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$`)

// plan validates the flags and lays out the sessions.
func (f loadtestFlags) plan(changed func(string) bool) (*loadPlan, error) {
	if err := f.validate(changed); err != nil {
		return nil, err
	}
	tenants, err := parseTenants(f.tenants)
	if err != nil {
		return nil, fmt.Errorf("--tenants: %w", err)
	}
	limit, period, err := parseRateLimit(f.rateLimit)
	if err != nil {
		return nil, fmt.Errorf("--rate-limit: %w", err)
	}
	if _, _, err := parseRateLimit(f.queueRateLimit); err != nil {
		return nil, fmt.Errorf("--queue-rate-limit: %w", err)
	}
	p := &loadPlan{flags: f, tenants: tenants, queued: f.queue != queueOff, limit: limit, period: period, tenantSpecs: f.tenants}
	p.sessions = layoutStarts(f.sessions, f.duration, f.replicas, tenants)
	return p, nil
}

// validate checks the numeric flags and the mode.
func (f loadtestFlags) validate(changed func(string) bool) error {
	switch {
	case f.sessions < 1 || f.sessions > loadtestMaxSessions:
		return fmt.Errorf("--sessions: want 1 to %d, got %d", loadtestMaxSessions, f.sessions)
	case f.duration < 0:
		return fmt.Errorf("--duration: want 0 (all at once) or more, got %s", f.duration)
	case f.replicas < 1 || f.replicas > loadtestMaxReplicas:
		return fmt.Errorf("--replicas: want 1 to %d, got %d", loadtestMaxReplicas, f.replicas)
	case f.modelLatency < 0:
		return fmt.Errorf("--model-latency: want 0 or more, got %s", f.modelLatency)
	case f.timeout <= 0:
		return fmt.Errorf("--timeout: want a positive duration, got %s", f.timeout)
	case f.duration >= f.timeout:
		return fmt.Errorf("--timeout (%s) must be longer than --duration (%s): it bounds the starts and the sessions' end", f.timeout, f.duration)
	}
	if f.queue == queueOff {
		for _, name := range []string{"queue-concurrency", "partition-worker-concurrency", "queue-polling-interval", "queue-rate-limit"} {
			if changed(name) {
				return fmt.Errorf("--%s applies to a queue: drop it with --queue %s (direct mode)", name, queueOff)
			}
		}
		return nil
	}
	switch {
	case !loadQueueNameRE.MatchString(f.queue):
		return fmt.Errorf("--queue: want %s (direct mode) or a queue name (1–100 of letters, digits and ._:-, starting with a letter or digit), got %q",
			queueOff, f.queue)
	case f.queueConcurrency < 1:
		return fmt.Errorf("--queue-concurrency: want 1 or more, got %d", f.queueConcurrency)
	case f.partitionWorkerConcurrency < 0 || f.partitionWorkerConcurrency > f.queueConcurrency:
		return fmt.Errorf("--partition-worker-concurrency: want 0 (--queue-concurrency) to --queue-concurrency (%d), got %d",
			f.queueConcurrency, f.partitionWorkerConcurrency)
	case f.pollingInterval < 0:
		return fmt.Errorf("--queue-polling-interval: want 0 (serve's default) or more, got %s", f.pollingInterval)
	}
	return nil
}

// parseTenants parses NAME:PERCENT,... and gives each tenant a random
// secret.
func parseTenants(s string) ([]loadTenant, error) {
	var out []loadTenant
	sum := 0
	for part := range strings.SplitSeq(s, ",") {
		name, pct, ok := strings.Cut(strings.TrimSpace(part), ":")
		n, err := strconv.Atoi(strings.TrimSpace(pct))
		switch {
		case !ok || err != nil:
			return nil, fmt.Errorf("want NAME:PERCENT,... such as big:90,small:10, got %q", part)
		case !tenantNameRE.MatchString(name):
			return nil, fmt.Errorf("tenant %q: want a name of 1–32 letters, digits and _.- starting with a letter or digit", name)
		case n < 1 || n > 100:
			return nil, fmt.Errorf("tenant %q: want a percent from 1 to 100, got %d", name, n)
		case slices.ContainsFunc(out, func(t loadTenant) bool { return t.name == name }):
			return nil, fmt.Errorf("tenant %q is given twice", name)
		}
		secret, err := randomSecret()
		if err != nil {
			return nil, err
		}
		out = append(out, loadTenant{name: name, percent: n, secret: secret})
		sum += n
	}
	if sum != 100 {
		return nil, fmt.Errorf("the percents sum to %d, want 100 (in %q)", sum, s)
	}
	return out, nil
}

// ids returns the session IDs of the plan.
func (p *loadPlan) ids() []string {
	out := make([]string, len(p.sessions))
	for i, s := range p.sessions {
		out[i] = s.id
	}
	return out
}

// randomSecret returns a bearer secret of 32 hex digits.
func randomSecret() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate a tenant's token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// layoutStarts assigns each session its tenant (a smooth weighted
// round-robin, so every prefix of the sequence follows the ratios as
// closely as whole sessions allow), its ID load-<tenant>-<n>, its replica
// (round-robin) and its send time (uniform over duration).
func layoutStarts(n int, duration time.Duration, replicas int, tenants []loadTenant) []plannedStart {
	current := make([]int, len(tenants))
	counts := make([]int, len(tenants))
	out := make([]plannedStart, n)
	for i := range out {
		best := 0
		for j, t := range tenants {
			current[j] += t.percent
			if current[j] > current[best] {
				best = j
			}
		}
		current[best] -= 100
		counts[best]++
		out[i] = plannedStart{
			id:      fmt.Sprintf("load-%s-%d", tenants[best].name, counts[best]),
			tenant:  best,
			replica: i % replicas,
			at:      time.Duration(int64(duration) * int64(i) / int64(n)),
		}
	}
	return out
}

// runLoadtest runs the load test and prints its report; changed reports
// whether a flag was given.
func runLoadtest(ctx context.Context, out, progress io.Writer, g *globals, f loadtestFlags, changed func(string) bool) error {
	p, err := f.plan(changed)
	if err != nil {
		return err
	}
	say := func(format string, args ...any) { fmt.Fprintf(progress, "• "+format+"\n", args...) }
	dbURL, closeDB, err := loadtestDB(ctx, g, say)
	if err != nil {
		return err
	}
	defer closeDB()
	r := &loadRun{plan: p, say: say, dbURL: dbURL}
	defer r.cleanup(ctx)
	rep, runErr := r.run(ctx)
	if rep == nil {
		return runErr
	}
	if f.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else if err := rep.writeText(out); err != nil {
		return err
	}
	return runErr
}

// loadtestDB returns the database URL: the configured one as it is, or a
// freshly created database on a provisioned server. The returned func
// releases the server.
func loadtestDB(ctx context.Context, g *globals, say func(string, ...any)) (string, func(), error) {
	if u := g.cfg.DatabaseURL; u != "" {
		say("using the configured database as it is (--database-url / HELIX_DATABASE_URL): it must be a scratch database")
		return u, func() {}, nil
	}
	srv, err := pgprovision.Provision(ctx, pgprovision.Options{Logf: say})
	if err != nil {
		return "", nil, err
	}
	release := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = srv.Close(cctx)
	}
	u, err := createDatabase(ctx, srv.URL, loadtestDatabase)
	if err != nil {
		release()
		return "", nil, err
	}
	say("created database %s", loadtestDatabase)
	return u, release, nil
}

// loadRun is one load test: its plan and the things it started.
type loadRun struct {
	plan     *loadPlan
	say      func(string, ...any)
	dbURL    string
	dir      string
	provider *fakeProvider
	replicas []*replica
	conn     *pgx.Conn
}

// cleanup stops whatever the run started and is still running, and removes
// its files. It is safe to call on every path.
func (r *loadRun) cleanup(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loadtestStopTimeout+5*time.Second)
	defer cancel()
	stopReplicas(r.replicas)
	if r.conn != nil {
		_ = r.conn.Close(cctx)
	}
	if r.provider != nil {
		r.provider.close(cctx)
	}
	if r.dir != "" {
		_ = os.RemoveAll(r.dir)
	}
}

// run starts the provider and the replicas, applies the load, waits for
// the sessions and measures. It returns a report when the load ran, with
// an error when not every session ended in time.
func (r *loadRun) run(ctx context.Context) (*loadtestReport, error) {
	if err := r.setUp(ctx); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, r.plan.flags.timeout)
	defer cancel()
	starts, waitErr := r.drive(wctx)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted: the replicas are stopped: %w", ctx.Err())
	}
	qctx, qcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer qcancel()
	rows, err := fetchSessions(qctx, r.dbURL, r.plan.ids())
	if err != nil {
		return nil, err
	}
	mem := make([]replicaMemory, len(r.replicas))
	for i, rp := range r.replicas {
		mem[i] = readMemory(rp.cmd.Process.Pid)
	}
	r.say("stopping the replicas (SIGTERM)")
	exits := stopReplicas(r.replicas)
	rep := buildReport(r.plan, starts, r.provider.snapshot(), rows, r.replicas, mem, exits)
	return rep, waitErr
}

// setUp starts the fake provider, writes the agent file, starts the
// replicas and connects to the database.
func (r *loadRun) setUp(ctx context.Context) error {
	if err := checkScratch(ctx, r.dbURL); err != nil {
		return err
	}
	var err error
	if r.provider, err = startFakeProvider(r.plan.flags.modelLatency, r.plan.limit, r.plan.period); err != nil {
		return err
	}
	r.say("fake model provider on %s (latency %s, rate limit %s)", r.provider.url, r.plan.flags.modelLatency, cmp.Or(r.plan.flags.rateLimit, "none"))
	if r.dir, err = os.MkdirTemp("", "helix-loadtest-"); err != nil {
		return fmt.Errorf("create a temporary directory for the agent file: %w", err)
	}
	agents, err := writeLoadAgentFile(r.dir, r.provider.url)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this program to start it as serve: %w", err)
	}
	for i := range r.plan.flags.replicas {
		rp, err := startReplica(exe, r.dir, r.serveArgs(agents), r.childEnv())
		if err != nil {
			return fmt.Errorf("replica %d: %w", i+1, err)
		}
		r.replicas = append(r.replicas, rp)
		if err := rp.waitListening(ctx, loadtestReadyTimeout); err != nil {
			return fmt.Errorf("replica %d: %w", i+1, err)
		}
		r.say("replica %d listening on %s (pid %d)", i+1, rp.addr, rp.cmd.Process.Pid)
	}
	if r.conn, err = pgx.Connect(ctx, r.dbURL); err != nil {
		return fmt.Errorf("connect to the database to follow the sessions: %w", err)
	}
	return nil
}

// checkScratch refuses a database that already holds load test sessions:
// their IDs would collide with this run's (a start would continue them).
func checkScratch(ctx context.Context, dbURL string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connect to the database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	d := diagnostics(conn)
	exist, err := d.RelationsExist(ctx, "helix.sessions")
	if err != nil {
		return fmt.Errorf("inspect the database: %w", err)
	}
	if !exist[0] {
		return nil
	}
	n, err := d.CountSessionsWithPrefix(ctx, "load-")
	if err != nil {
		return fmt.Errorf("inspect the database: %w", err)
	}
	if n > 0 {
		return fmt.Errorf("the database already holds %d load test sessions (load-…): give a fresh scratch database, "+
			"or leave out --database-url to let the load test recreate %s", n, loadtestDatabase)
	}
	return nil
}

// writeLoadAgentFile writes the agent file of the replicas: one agent on
// the fake provider. It retries a 429 up to 10 times (the provider's
// default is 3), as an agent behind a shared rate limit should: when a
// loaded machine bunches the calls past the limit, the rejected ones wait
// for the slots the provider names (retry-after-ms) and race for them, and
// a session that lost four races in a row would fail with
// provider_rate_limited; the report counts every 429 either way.
func writeLoadAgentFile(dir, providerURL string) (string, error) {
	path := filepath.Join(dir, "agents.yaml")
	body := fmt.Sprintf(`agents:
  - name: %s
    description: Answers in one word (helix-dbos loadtest)
    systemPrompt: Answer in one word.
    maxSteps: 2
    model: {provider: openai, model: %s, baseURL: %s/v1, maxRetries: 10}
`, loadtestAgent, loadtestModel, providerURL)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		return "", fmt.Errorf("write the agent file: %w", err)
	}
	return path, nil
}

// serveArgs are the command line of a replica.
func (r *loadRun) serveArgs(agents string) []string {
	f := r.plan.flags
	args := []string{"serve", "--agents", agents, "--addr", "127.0.0.1:0", "--queue", f.queue}
	if !r.plan.queued {
		return args
	}
	args = append(args, "--queue-concurrency", strconv.Itoa(f.queueConcurrency),
		"--queue-partition-worker-concurrency", strconv.Itoa(f.partitionWorkerConcurrency))
	if limit := r.plan.queueRateLimit(); limit != "" {
		args = append(args, "--queue-rate-limit", limit)
	}
	if f.pollingInterval > 0 {
		args = append(args, "--queue-polling-interval", f.pollingInterval.String())
	}
	return args
}

// queueRateLimit is the replicas' --queue-rate-limit ("" for none):
// --queue-rate-limit, else --rate-limit.
func (p *loadPlan) queueRateLimit() string {
	if !p.queued {
		return ""
	}
	return cmp.Or(p.flags.queueRateLimit, p.flags.rateLimit)
}

// childEnv is a replica's environment: this process's without the HELIX_*
// variables (so a developer's settings do not change the replicas), plus
// the database URL and the tenants' tokens. Both go through the
// environment rather than the command line, which other users of the
// machine can read.
func (r *loadRun) childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix) {
			env = append(env, kv)
		}
	}
	tokens := make([]string, len(r.plan.tenants))
	for i, t := range r.plan.tenants {
		tokens[i] = t.name + ":" + t.secret
	}
	return append(env, pgprovision.EnvDatabaseURL+"="+r.dbURL, envName("auth-token")+"="+strings.Join(tokens, ","))
}

// ---- replicas

// replica is one `serve` process.
type replica struct {
	cmd    *exec.Cmd
	stdin  io.Closer
	stdout *outputTail
	stderr *outputTail
	exited chan struct{}
	err    error // how it exited; set when exited is closed
	addr   string
	once   sync.Once
	exit   string // how stop ended it
}

// startReplica starts `serve` with args; its stdin is held open.
func startReplica(exe, dir string, args, env []string) (*replica, error) {
	rp := &replica{cmd: exec.Command(exe, args...), stdout: newOutputTail(), stderr: newOutputTail(), exited: make(chan struct{})}
	rp.cmd.Dir, rp.cmd.Env = dir, env
	rp.cmd.Stdout, rp.cmd.Stderr = rp.stdout, rp.stderr
	var err error
	if rp.stdin, err = rp.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := rp.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s serve: %w", exe, err)
	}
	go func() {
		rp.err = rp.cmd.Wait()
		close(rp.exited)
	}()
	return rp, nil
}

// listeningRE finds serve's address in its output.
var listeningRE = regexp.MustCompile(`listening on http://(\S+) \(executor `)

// waitListening waits for the replica's "listening on" line.
func (rp *replica) waitListening(ctx context.Context, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		if m := listeningRE.FindStringSubmatch(rp.stdout.String()); m != nil {
			rp.addr = m[1]
			return nil
		}
		select {
		case <-rp.stdout.changed:
		case <-rp.exited:
			if m := listeningRE.FindStringSubmatch(rp.stdout.String()); m == nil {
				return fmt.Errorf("serve exited before listening (%v)%s", rp.err, rp.output())
			}
		case <-deadline.C:
			return fmt.Errorf("serve did not listen within %s%s", timeout, rp.output())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// output is the replica's captured output, for an error.
func (rp *replica) output() string {
	return fmt.Sprintf("; its stdout:\n%s\nits stderr:\n%s", cmp.Or(strings.TrimSpace(rp.stdout.String()), "(none)"),
		cmp.Or(strings.TrimSpace(rp.stderr.String()), "(none)"))
}

// alive returns an error when the replica has exited.
func (rp *replica) alive() error {
	select {
	case <-rp.exited:
		return fmt.Errorf("a replica (pid %d) exited during the load (%v)%s", rp.cmd.Process.Pid, rp.err, rp.output())
	default:
		return nil
	}
}

// stop sends SIGTERM and waits for the replica, killing it after
// loadtestStopTimeout. It returns how the replica ended; later calls
// return the same.
func (rp *replica) stop() string {
	rp.once.Do(func() {
		_ = rp.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(loadtestStopTimeout)
		defer t.Stop()
		select {
		case <-rp.exited:
			rp.exit = "stopped"
			if rp.err != nil {
				rp.exit = rp.err.Error()
			}
		case <-t.C:
			_ = rp.cmd.Process.Kill()
			<-rp.exited
			rp.exit = fmt.Sprintf("killed: no exit within %s of SIGTERM", loadtestStopTimeout)
		}
		_ = rp.stdin.Close()
	})
	return rp.exit
}

// stopReplicas stops the replicas concurrently and returns how each ended.
func stopReplicas(reps []*replica) []string {
	out := make([]string, len(reps))
	var wg sync.WaitGroup
	for i, rp := range reps {
		wg.Go(func() { out[i] = rp.stop() })
	}
	wg.Wait()
	return out
}

// replicaMemory is a process's resident memory, from /proc.
type replicaMemory struct {
	peakKB, currentKB int64
	err               error
}

// readMemory reads VmHWM (peak RSS) and VmRSS of a process from
// /proc/PID/status (Linux only).
func readMemory(pid int) replicaMemory {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return replicaMemory{err: fmt.Errorf("read the memory of pid %d (Linux /proc only): %w", pid, err)}
	}
	var m replicaMemory
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmHWM" && key != "VmRSS") {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		if key == "VmHWM" {
			m.peakKB = kb
		} else {
			m.currentKB = kb
		}
	}
	return m
}

// outputTail keeps the last loadtestOutputTail bytes written to it and
// signals each write on changed.
type outputTail struct {
	mu      sync.Mutex
	b       []byte
	changed chan struct{}
}

// newOutputTail returns an empty outputTail.
func newOutputTail() *outputTail { return &outputTail{changed: make(chan struct{}, 1)} }

// Write keeps p and signals the write.
func (o *outputTail) Write(p []byte) (int, error) {
	o.mu.Lock()
	o.b = append(o.b, p...)
	if over := len(o.b) - loadtestOutputTail; over > 0 {
		o.b = slices.Clone(o.b[over:])
	}
	o.mu.Unlock()
	select {
	case o.changed <- struct{}{}:
	default:
	}
	return len(p), nil
}

// String returns what is kept.
func (o *outputTail) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return string(o.b)
}

// ---- load

// startResult is what one POST /start did.
type startResult struct {
	sent   time.Time // zero when it was not sent
	status int
	detail string // the body of a non-202 answer, or the error
}

// drive sends the starts and waits, polling the database, until every
// session ended, a replica died or ctx ends (--timeout).
func (r *loadRun) drive(ctx context.Context) ([]startResult, error) {
	var accepted, sent atomic.Int64
	results := make([]startResult, len(r.plan.sessions))
	loadDone := make(chan struct{})
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.say("sending %d starts over %s, round-robin across the replicas", len(r.plan.sessions), r.plan.flags.duration)
	go func() {
		defer close(loadDone)
		sendStarts(lctx, r.plan, r.replicas, results, &sent, &accepted)
	}()
	err := r.waitSessions(ctx, loadDone, &sent, &accepted)
	cancel()
	<-loadDone
	return results, err
}

// sendStarts sends the plan's starts on schedule from loadtestWorkers
// goroutines and records each in results.
func sendStarts(ctx context.Context, p *loadPlan, reps []*replica, results []startResult, sent, accepted *atomic.Int64) {
	client := &http.Client{
		Timeout:   loadtestRequestTimeout,
		Transport: &http.Transport{MaxIdleConnsPerHost: loadtestWorkers, DisableCompression: true},
	}
	defer client.CloseIdleConnections()
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range loadtestWorkers {
		wg.Go(func() {
			for i := range jobs {
				results[i] = sendStart(ctx, client, p, reps, i)
				sent.Add(1)
				if results[i].status == http.StatusAccepted {
					accepted.Add(1)
				}
			}
		})
	}
	dispatch(ctx, p.sessions, jobs)
	close(jobs)
	wg.Wait()
}

// dispatch hands each planned start to a worker at its time, until ctx
// ends.
func dispatch(ctx context.Context, plan []plannedStart, jobs chan<- int) {
	begin := time.Now()
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for i, s := range plan {
		if wait := time.Until(begin.Add(s.at)); wait > 0 {
			t.Reset(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
		select {
		case jobs <- i:
		case <-ctx.Done():
			return
		}
	}
}

// sendStart sends one POST /start.
func sendStart(ctx context.Context, client *http.Client, p *loadPlan, reps []*replica, i int) startResult {
	s := p.sessions[i]
	body, _ := json.Marshal(map[string]string{"agentType": loadtestAgent, "message": "load " + s.id, "sessionId": s.id})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+reps[s.replica].addr+"/start", bytes.NewReader(body))
	if err != nil {
		return startResult{detail: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+p.tenants[s.tenant].secret)
	res := startResult{sent: time.Now()}
	resp, err := client.Do(req)
	if err != nil {
		res.detail = fmt.Sprintf("%s: %v", s.id, err)
		return res
	}
	defer resp.Body.Close()
	res.status = resp.StatusCode
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusAccepted {
		res.detail = fmt.Sprintf("%s: %s: %s", s.id, resp.Status, strings.TrimSpace(string(b)))
	}
	return res
}

// sessionCounts is the state of the load test's sessions in the database.
type sessionCounts struct {
	rows, completed, failed, enqueued int
}

// waitSessions polls the database every loadtestPoll and prints progress
// every second, until the load is sent and every session that exists has
// completed or failed.
func (r *loadRun) waitSessions(ctx context.Context, loadDone <-chan struct{}, sent, accepted *atomic.Int64) error {
	ids := r.plan.ids()
	begin, lastSay := time.Now(), time.Now()
	tick := time.NewTicker(loadtestPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("not every session ended within --timeout %s (%d of %d starts sent): raise --timeout, or lower --sessions",
				r.plan.flags.timeout, sent.Load(), len(r.plan.sessions))
		case <-tick.C:
		}
		for _, rp := range r.replicas {
			if err := rp.alive(); err != nil {
				return err
			}
		}
		c, err := pollSessions(ctx, r.conn, ids)
		if err != nil {
			if ctx.Err() != nil {
				continue // reported at the top of the loop
			}
			return err
		}
		if time.Since(lastSay) >= time.Second {
			lastSay = time.Now()
			r.say("%5.1fs  started %d/%d  completed %d  failed %d  queued %d", time.Since(begin).Seconds(), accepted.Load(),
				len(r.plan.sessions), c.completed, c.failed, c.enqueued)
		}
		select {
		case <-loadDone:
			if c.rows >= int(accepted.Load()) && c.completed+c.failed == c.rows {
				r.say("%5.1fs  all %d sessions ended: %d completed, %d failed", time.Since(begin).Seconds(), c.rows, c.completed, c.failed)
				return nil
			}
		default:
		}
	}
}

// pollSessions counts the load test's sessions by status, and the
// workflows waiting in a DBOS queue.
func pollSessions(ctx context.Context, conn *pgx.Conn, ids []string) (sessionCounts, error) {
	n, err := diagnostics(conn).CountSessionOutcomes(ctx, ids)
	if err != nil {
		return sessionCounts{}, err
	}
	return sessionCounts{rows: n.Rows, completed: n.Completed, failed: n.Failed, enqueued: n.Enqueued}, nil
}

// sessionRow is a load test session as the database has it.
type sessionRow struct {
	status             string
	created, updatedAt time.Time
	errorCode          string // of its last run, when it failed
}

// fetchSessions reads the load test's sessions on a connection of its
// own: the one that followed them may have been closed by the end of
// --timeout, which cancelled its query.
func fetchSessions(ctx context.Context, dbURL string, ids []string) (map[string]sessionRow, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("connect to the database to read the sessions: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	outcomes, err := diagnostics(conn).SessionOutcomes(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]sessionRow, len(outcomes))
	for id, o := range outcomes {
		out[id] = sessionRow{status: o.Status, created: o.CreatedAt, updatedAt: o.LastActive, errorCode: o.ErrorCode}
	}
	return out, nil
}
