package integration_test

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/recv"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// Knobs of the chaos suite; `make soak` sets them for the long version.
const (
	chaosEnvSessions = "HELIX_CHAOS_SESSIONS" // sessions to run (default 60)
	chaosEnvDuration = "HELIX_CHAOS_DURATION" // spread the requests over this long (default 20s)
	chaosEnvReport   = "HELIX_CHAOS_REPORT"   // write the run's figures there, as JSON
	// chaosEnvPGRestart=0 turns off the Postgres restarts under load (on by
	// default).
	chaosEnvPGRestart = "HELIX_CHAOS_PG_RESTART"
)

// chaosEnvQueued=1 makes a worker admit its sessions through a queue.
const chaosEnvQueued = "HELIX_CHAOS_QUEUED"

// chaosHibernateAfter is the workers' Config.HibernateAfter: shorter than
// the submitter's poll (50 ms), so that most waits of the root runs that
// start at once hibernate and are woken by their answers, some racing
// them.
const chaosHibernateAfter = 30 * time.Millisecond

// chaosNestedAnswerLimit is how long the submitter leaves the lead's
// helper waiting for its approval at most: it answers once the lead's run
// hibernated (the helper first, then its lead for it), or after this
// when it did not (a kill or a restart in between, say).
const chaosNestedAnswerLimit = 5 * time.Second

// chaosLease is every worker's executor lease.
const chaosLease = 2 * time.Second

// TestChaosWorkersDieAndSessionsComplete runs sessions of every kind (tools
// in parallel, a client tool and an approval answered from this process, a
// sub-agent, a persistent companion consulted twice, a transactional tool
// called in parallel then once more) on three worker
// processes while it SIGKILLs a random worker every 2–5 s and replaces it
// with one of a new executor ID (one is never replaced; half of the dead
// are made to look like processes of another machine, taken over only once
// their lease expired), freezes one worker with SIGSTOP for longer than the
// lease (a zombie) and restarts Postgres under load
// (HELIX_CHAOS_PG_RESTART=0 turns that off). Then:
//
//   - every session completed, with the transcript of an uninterrupted run
//     (no message lost or repeated) and the same stream, chunk for chunk,
//     besides one stream_resync per discarded model attempt;
//   - no tool execution began after its step was checkpointed, every tool
//     effect completed, and each call kept one idempotency key;
//   - each transactional tool call's effect (a row of a table UNIQUE on the
//     call, written with no ON CONFLICT, in the tool's transaction)
//     exists exactly once, each tool result has its row and none is an
//     error: a kill inside the tool's transaction rolled its row back and
//     the call ran again, a kill after its commit never ran it again (the
//     repeated effects, 0, are logged and written to HELIX_CHAOS_REPORT);
//   - each answer was one message, consumed once;
//   - no workflow is left pending, on a dead executor or anywhere;
//   - every dead executor that held sessions was taken over (the
//     distribution of kill-to-takeover times is logged, and written to
//     HELIX_CHAOS_REPORT).
func TestChaosWorkersDieAndSessionsComplete(t *testing.T) {
	t.Parallel()
	server := serverURL(t)
	sessions := chaosEnvInt(t, chaosEnvSessions, 60)
	spread := chaosEnvDurationOr(t, chaosEnvDuration, 20*time.Second)
	ref := chaosReference(t, server)

	pg := startChaosPostgres(t)
	pool, err := pgxpool.New(t.Context(), pg.url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(t.Context(), chaosSchema+crashSchema)
	require.NoError(t, err)

	c := &chaos{t: t, pool: pool, url: pg.url, pg: pg, workers: map[string]*crashChild{}}
	for range 3 {
		c.spawn()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Second+spread)
	defer cancel()
	var wg sync.WaitGroup
	stop, scripted := make(chan struct{}), make(chan struct{})
	wg.Go(func() { c.request(ctx, sessions, spread) })
	wg.Go(func() { c.submit(ctx, stop) })
	wg.Go(func() { c.havoc(ctx, stop, scripted) })

	done := c.awaitCompleted(ctx, sessions)
	select { // every scripted event happened, whatever the sessions' pace
	case <-scripted:
	case <-ctx.Done():
	}
	close(stop)
	wg.Wait()
	require.True(t, done, "every session completes (%d of %d did; unfinished: %s; %s)",
		c.completed(sessions), sessions, c.unfinished(), c.events())
	c.awaitNoPendingWorkflows(ctx)
	c.check(ref, sessions)
	c.report(sessions)
}

// chaos is the state of one chaos run, seen from the parent.
type chaos struct {
	t    *testing.T
	pool *pgxpool.Pool
	url  string
	pg   *chaosPostgres

	mu      sync.Mutex
	next    int
	workers map[string]*crashChild // live (or frozen) workers by executor ID
	kills   []chaosKill
	frozen  []*crashChild // the zombies
	thaws   []chaosThaw   // when each zombie was frozen and resumed
	log     []string      // the events, in order
	submits int
	tx      chaosTxStats // the transactional tool's figures (check)
}

// chaosThaw is one frozen worker's freeze: when it was stopped and
// resumed (this process's clock, the workers' too: one machine).
type chaosThaw struct {
	id             string
	froze, resumed time.Time
}

// chaosInFlight is how soon after its worker resumed a tool body counts as
// one in flight at the freeze: past its fencing check before the freeze,
// it reads the clock for its start mark as the worker thaws (the in-flight
// bodies operations.md documents).
const chaosInFlight = chaosLease

// inFlight reports whether a tool body that began at at on worker id,
// after its step was checkpointed at cp, was in flight when that worker
// froze: the worker froze before the checkpoint and the body began as it
// resumed.
func (c *chaos) inFlight(id string, at, cp time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.thaws {
		if f.id == id && f.froze.Before(cp) && !at.Before(f.resumed) && at.Sub(f.resumed) < chaosInFlight {
			return true
		}
	}
	return false
}

// chaosKill is one SIGKILLed worker.
type chaosKill struct {
	id        string
	at        time.Time
	elsewhere bool // made to look like a process of another machine
	aim       chaosAim
	target    string // the refund call (session/call ID) it was aimed at, if one was found
}

func (c *chaos) event(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, fmt.Sprintf(format, args...))
}

func (c *chaos) events() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.log, "; ")
}

// chaosQueuedWorker reports whether worker n (executor chaos-w{n}) admits
// the sessions it starts through the queue: every other one.
func chaosQueuedWorker(n int) bool { return n%2 == 1 }

// queuedWorkers lists the executor IDs of the queued workers spawned so
// far.
func (c *chaos) queuedWorkers() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for n := range c.next {
		if chaosQueuedWorker(n) {
			out = append(out, fmt.Sprintf("chaos-w%d", n))
		}
	}
	return out
}

// spawn starts a worker with a new executor ID.
func (c *chaos) spawn() {
	c.mu.Lock()
	n := c.next
	id := fmt.Sprintf("chaos-w%d", n)
	c.next++
	c.mu.Unlock()
	env := []string{crashEnvExecutor + "=" + id, crashEnvLease + "=" + chaosLease.String()}
	if chaosQueuedWorker(n) {
		// Every other worker admits the sessions it starts through the
		// queue (and every worker runs queued segments): the cluster
		// mixes both modes.
		env = append(env, chaosEnvQueued+"=1")
	}
	w := startCrashChild(c.t, c.url, chaosModeWorker, "", 0, env...)
	c.mu.Lock()
	c.workers[id] = w
	c.mu.Unlock()
}

// pick returns a random live worker.
func (c *chaos) pick() (string, *crashChild) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := slices.Sorted(func(yield func(string) bool) {
		for id := range c.workers {
			if !yield(id) {
				return
			}
		}
	})
	id := ids[rand.IntN(len(ids))]
	return id, c.workers[id]
}

// pickBusy returns the live worker that owns the most pending workflows
// (a random one when none does): a freeze then has something to fence.
func (c *chaos) pickBusy() (string, *crashChild) {
	var busiest string
	_ = c.pool.QueryRow(c.t.Context(), `SELECT executor_id FROM dbos.workflow_status WHERE status = 'PENDING'
		GROUP BY executor_id ORDER BY count(*) DESC LIMIT 1`).Scan(&busiest)
	c.mu.Lock()
	w, ok := c.workers[busiest]
	c.mu.Unlock()
	if ok {
		return busiest, w
	}
	return c.pick()
}

// request asks for the sessions, one kind after the other, spread evenly.
func (c *chaos) request(ctx context.Context, n int, spread time.Duration) {
	for i := range n {
		kind := chaosKinds[i%len(chaosKinds)]
		// Postgres may be restarting: retried until it answers.
		_ = retryReads(ctx, func() error {
			_, err := c.pool.Exec(ctx, `INSERT INTO chaos_requests (session_id, kind) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
				fmt.Sprintf("%s-%03d", kind, i), kind)
			return err
		})
		select {
		case <-ctx.Done():
			return
		case <-time.After(spread / time.Duration(n)):
		}
	}
}

// submit answers, from this process, every client tool call and approval
// the sessions wait for, until stop.
func (c *chaos) submit(ctx context.Context, stop <-chan struct{}) {
	var client *engine.Client
	for client == nil {
		// The workers' engines migrate the database: until one has, a
		// client cannot connect.
		var err error
		if client, err = engine.NewClient(ctx, engine.ClientConfig{DatabaseURL: c.url}); err != nil {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	defer client.Close()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
		// Answers go to the root session (a sub-agent's calls too). The
		// helper's approval waits until its lead hibernated for it (a
		// fixed delay was not enough under load), chaosNestedAnswerLimit
		// at most.
		rows, err := c.pool.Query(ctx, `SELECT s.root_session_id, p.key, p.val->>'toolName' FROM helix.sessions s
			CROSS JOIN LATERAL jsonb_each(s.pending_client_tool_calls) AS p(key, val)
			WHERE s.pending_client_tool_calls <> '{}'::jsonb AND NOT p.val ? 'submission' AND NOT p.val ? 'timedOutAt'
			  AND (p.key <> 's-pay'
			    OR EXISTS (SELECT 1 FROM helix.runs r WHERE r.session_id = s.root_session_id AND r.hibernated_at IS NOT NULL)
			    OR (p.val->>'createdAt')::bigint < (extract(epoch FROM clock_timestamp()) * 1000)::bigint - $1)`,
			chaosNestedAnswerLimit.Milliseconds())
		if err != nil {
			continue // Postgres restarting
		}
		type call struct{ session, id, tool string }
		var calls []call
		for rows.Next() {
			var k call
			if rows.Scan(&k.session, &k.id, &k.tool) == nil {
				calls = append(calls, k)
			}
		}
		rows.Close()
		for _, k := range calls {
			sub := helix.Approve(k.id, "ok")
			if k.tool == "ask_user" {
				if sub, err = helix.ClientToolResult(k.id, map[string]string{"answer": "yes"}); err != nil {
					c.event("submitter: %v", err)
					continue
				}
			}
			if _, err := client.SubmitToolResult(ctx, k.session, sub); err == nil {
				c.mu.Lock()
				c.submits++
				c.mu.Unlock()
			}
		}
	}
}

// havoc runs the scripted events, then random kills, every 2–5 s (an
// aimed kill waits up to aimWait more for its target) until stop: kill,
// kill (never replaced), freeze one worker past its lease, restart
// Postgres (unless HELIX_CHAOS_PG_RESTART=0), then kills, with a freeze
// every 15 events and a restart every 30 (reached in the soak's longer
// runs).
func (c *chaos) havoc(ctx context.Context, stop <-chan struct{}, scripted chan<- struct{}) {
	restarts := os.Getenv(chaosEnvPGRestart) != "0"
	script := []func(){c.kill(true), c.kill(false), c.freeze, c.kill(true)}
	if restarts {
		script = []func(){c.kill(true), c.kill(false), c.freeze, c.restartPostgres, c.kill(true)}
	}
	for i := 0; ; i++ {
		if i == len(script) {
			close(scripted)
		}
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(2000+rand.IntN(3000)) * time.Millisecond):
		}
		switch {
		case i < len(script):
			script[i]()
		case restarts && i%30 == 0: // about every two minutes: the soak's longer runs
			c.restartPostgres()
		case i%15 == 0:
			c.freeze()
		default:
			c.kill(true)()
		}
	}
}

// kill SIGKILLs a worker; replace starts one with a new executor ID. Two
// kills in three are aimed at a transactional tool (aimRefund): the first
// at a worker inside a refund's transaction, the second just after one
// committed; the third worker is picked at random, and so on.
// Every other dead worker dies as a process of another machine would: it
// is frozen, its row rewritten to another host and pid namespace (whose
// pids this machine cannot check), then killed, so that its sessions move
// only once its lease expired.
func (c *chaos) kill(replace bool) func() {
	return func() {
		c.mu.Lock()
		elsewhere := len(c.kills)%2 == 1
		aim := chaosAim(len(c.kills) % 3)
		c.mu.Unlock()
		id, w, target := c.aimRefund(aim)
		if elsewhere {
			require.NoError(c.t, w.cmd.Process.Signal(syscall.SIGSTOP))
			c.retry(func(ctx context.Context) error {
				_, err := c.pool.Exec(ctx, `UPDATE helix.executors SET hostname = 'another-host', pid_namespace = 'another-machine'
					WHERE executor_id = $1`, id)
				return err
			})
		}
		w.kill(c.t)
		at := time.Now()
		c.mu.Lock()
		delete(c.workers, id)
		c.kills = append(c.kills, chaosKill{id: id, at: at, elsewhere: elsewhere, aim: aim, target: target})
		c.mu.Unlock()
		// Its claims go back to the pool: it is certainly dead.
		c.retry(func(ctx context.Context) error {
			_, err := c.pool.Exec(ctx, `UPDATE chaos_requests SET claimed_by = NULL WHERE claimed_by = $1 AND NOT started`, id)
			return err
		})
		c.event("killed %s (elsewhere=%v, replaced=%v%s)", id, elsewhere, replace, aim.describe(target))
		if replace {
			c.spawn()
		}
	}
}

// retry runs a statement of the havoc until it succeeds (Postgres may be
// restarting), for up to 20 s.
func (c *chaos) retry(statement func(ctx context.Context) error) {
	ctx, cancel := context.WithTimeout(c.t.Context(), 20*time.Second)
	defer cancel()
	if err := retryReads(ctx, func() error { return statement(ctx) }); err != nil {
		c.event("havoc statement failed: %v", err)
	}
}

// freeze SIGSTOPs the busiest worker until its last heartbeat is two and a
// half leases old, then resumes it: a zombie whose sessions were taken over
// meanwhile.
func (c *chaos) freeze() {
	id, w := c.pickBusy()
	// A worker picked at random may not have launched yet (a loaded
	// machine): it has no lease to let expire until its engine registered.
	crashPoll(c.t, id+"'s engine to launch", w.done, func(ctx context.Context) (bool, error) {
		var n int
		err := c.pool.QueryRow(ctx, `SELECT count(*) FROM helix.executors WHERE executor_id = $1`, id).Scan(&n)
		return n == 1, err
	})
	froze := time.Now()
	require.NoError(c.t, w.cmd.Process.Signal(syscall.SIGSTOP))
	c.event("froze %s", id)
	crashPoll(c.t, "the frozen worker's lease to be long expired", nil, func(ctx context.Context) (bool, error) {
		var expired bool
		err := c.pool.QueryRow(ctx, `SELECT heartbeat_at < now() - make_interval(secs => $2) FROM helix.executors WHERE executor_id = $1`,
			id, (chaosLease * 5 / 2).Seconds()).Scan(&expired)
		return expired, err
	})
	resumed := time.Now()
	require.NoError(c.t, w.cmd.Process.Signal(syscall.SIGCONT))
	c.mu.Lock()
	c.frozen = append(c.frozen, w)
	c.thaws = append(c.thaws, chaosThaw{id: id, froze: froze, resumed: resumed})
	c.mu.Unlock()
	c.event("resumed %s", id)
}

// restartPostgres stops the server under load and starts it again, and
// returns once it accepts connections.
func (c *chaos) restartPostgres() {
	began := time.Now()
	c.pg.restart(c.t)
	c.event("restarted Postgres in %s", time.Since(began).Round(time.Millisecond))
}

// awaitCompleted waits until every requested session completed.
//
// Meanwhile it hands the claims of killed workers back, again and again: a
// worker killed while its claiming statement was in flight can have that
// statement commit after the kill's own release ran (the server finishes a
// statement its client no longer waits for), which would leave the session
// claimed by a dead worker for ever.
func (c *chaos) awaitCompleted(ctx context.Context, n int) bool {
	for {
		if c.completed(n) == n {
			return true
		}
		c.releaseDeadClaims(ctx)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// releaseDeadClaims hands the unstarted claims of every killed worker
// back; an error (Postgres restarting) waits for the next call.
func (c *chaos) releaseDeadClaims(ctx context.Context) {
	c.mu.Lock()
	dead := make([]string, len(c.kills))
	for i, k := range c.kills {
		dead[i] = k.id
	}
	c.mu.Unlock()
	if len(dead) > 0 {
		_, _ = c.pool.Exec(ctx, `UPDATE chaos_requests SET claimed_by = NULL WHERE claimed_by = ANY($1) AND NOT started`, dead)
	}
}

func (c *chaos) completed(int) int {
	var done int
	_ = c.pool.QueryRow(c.t.Context(), `SELECT count(*) FROM chaos_requests r JOIN helix.sessions s USING (session_id)
		WHERE s.status = 'completed'`).Scan(&done)
	return done
}

// unfinished describes the requested sessions that did not complete: the
// request's claim, the session's status, its runs and the workflows of its
// turns, with a failed one's error (a failed test's diagnosis).
func (c *chaos) unfinished() string {
	return c.rows("; ", `SELECT r.session_id || ' (claimed by ' || coalesce(r.claimed_by, '-') || ', started ' || r.started ||
		', session ' || coalesce(s.status, 'missing') || ', runs [' || coalesce((SELECT string_agg(u.status || ' on ' || coalesce(u.workflow_id, '?'), ', ')
			FROM helix.runs u WHERE u.session_id = r.session_id), '') || '], workflows [' ||
		coalesce((SELECT string_agg(w.workflow_uuid || ' ' || w.status || ' on ' || coalesce(w.executor_id, '?') ||
				coalesce(' (error: ' || left(w.error, 400) || ')', ''), ', ' ORDER BY w.created_at)
			FROM dbos.workflow_status w WHERE starts_with(w.workflow_uuid, r.session_id)), '') || '])'
		FROM chaos_requests r LEFT JOIN helix.sessions s USING (session_id)
		WHERE s.status IS DISTINCT FROM 'completed' ORDER BY r.session_id`)
}

// streamRows lists the rows of the stream of session sid in order (a
// failed stream check's diagnosis): sequence, time, step, attempt, run and
// the start of the row's chunk.
func (c *chaos) streamRows(sid string) string {
	return c.rows("\n", `SELECT c.seq || ' ' || to_char(c.created_at, 'HH24:MI:SS.MS') || ' step ' || c.step ||
			' attempt ' || c.attempt || ' n ' || c.n || ' run ' || coalesce(c.run_id, '-') || ': ' || left(c.chunk::text, 200)
		FROM helix.stream_chunks c JOIN helix.streams s ON s.key = c.stream_key
		WHERE s.stream_id = (SELECT stream_id FROM helix.sessions WHERE session_id = $1) ORDER BY c.seq`, sid)
}

// workflowsOf lists the DBOS workflows of session sid: status, executor,
// creation and last update.
func (c *chaos) workflowsOf(sid string) string {
	return c.rows("; ", `SELECT workflow_uuid || ' ' || status || ' on ' || coalesce(executor_id, '?') ||
			' created ' || to_char(to_timestamp(created_at / 1000.0), 'HH24:MI:SS.MS') ||
			' updated ' || to_char(to_timestamp(updated_at / 1000.0), 'HH24:MI:SS.MS') || ' attempts ' || coalesce(recovery_attempts, 0)
		FROM dbos.workflow_status WHERE starts_with(workflow_uuid, $1) ORDER BY created_at`, sid)
}

// rows runs query, whose rows are one text each, for a failure's
// diagnosis: its rows joined with sep, or its error.
func (c *chaos) rows(sep, query string, args ...any) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.t.Context()), 10*time.Second)
	defer cancel()
	rows, err := c.pool.Query(ctx, query, args...)
	if err != nil {
		return err.Error()
	}
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err.Error()
	}
	return strings.Join(list, sep)
}

// awaitNoPendingWorkflows waits until DBOS holds nothing unfinished: the
// hooks and child workflows of the last sessions end just after them.
func (c *chaos) awaitNoPendingWorkflows(ctx context.Context) {
	t := c.t
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		var left []string
		rows, err := c.pool.Query(ctx, `SELECT workflow_uuid || ' ' || status || ' on ' || coalesce(executor_id, '?')
			FROM dbos.workflow_status WHERE status NOT IN ('SUCCESS')`)
		require.NoError(t, err)
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				rows.Close()
				require.NoError(t, err)
			}
			left = append(left, s)
		}
		rows.Close()
		if len(left) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("workflows left unfinished: %v (%s)", left, c.events())
		case <-tick.C:
		}
	}
}

// check asserts the promises listed on the test.
func (c *chaos) check(ref map[string]chaosRef, n int) {
	t := c.t
	ctx := t.Context()
	st, err := postgres.New(c.pool)
	require.NoError(t, err)
	defer st.Close()
	d := &crashDB{url: c.url, pool: c.pool, st: st}
	rows, err := c.pool.Query(ctx, `SELECT session_id, kind FROM chaos_requests ORDER BY session_id`)
	require.NoError(t, err)
	kinds := map[string]string{}
	for rows.Next() {
		var sid, kind string
		if err := rows.Scan(&sid, &kind); err != nil {
			rows.Close()
			require.NoError(t, err)
		}
		kinds[sid] = kind
	}
	rows.Close()
	require.Len(t, kinds, n)
	// The transactional tool first: its failure names the repeated effect
	// that the transcripts' comparison would only show as a difference.
	c.tx = c.checkRefunds(d, kinds)
	resyncs, queuedChunks := 0, 0
	for sid, kind := range kinds {
		got := chaosProjection(t, d, sid)
		require.Equal(t, ref[kind].messages, got.messages, "session %s: the transcript of an uninterrupted run", sid)
		if !assert.Equal(t, ref[kind].stream, got.stream, "session %s: the stream of an uninterrupted run, besides resyncs", sid) {
			t.Fatalf("session %s's stream, in order:\n%s\nits workflows: %s\nthe run's events: %s", sid, c.streamRows(sid), c.workflowsOf(sid), c.events())
		}
		resyncs += got.resyncs
		queuedChunks += got.queued
	}

	// Tool executions: none began after its step was checkpointed; every
	// effect completed; one idempotency key per call.
	committed := chaosCommittedTools(t, c.pool)
	type execution struct {
		key, phase, worker string
		at                 time.Time
	}
	var executions []execution
	rows, err = c.pool.Query(ctx, `SELECT key, phase, worker, at FROM chaos_tool_runs ORDER BY at`)
	require.NoError(t, err)
	for rows.Next() {
		var x execution
		if err := rows.Scan(&x.key, &x.phase, &x.worker, &x.at); err != nil {
			rows.Close()
			require.NoError(t, err)
		}
		executions = append(executions, x)
	}
	rows.Close()
	require.NoError(t, rows.Err())
	type runs struct{ starts, dones int }
	byKey := map[string]*runs{}
	for _, x := range executions {
		r := byKey[x.key]
		if r == nil {
			r = &runs{}
			byKey[x.key] = r
		}
		if x.phase == "start" {
			r.starts++
			// DBOS records the checkpoint's time to the millisecond. A
			// body in flight when its worker froze (past its fencing
			// check) begins as the worker resumes; a transactional one
			// then cannot commit (the refunds' check), another one is the
			// in-flight execution operations.md documents.
			if cp, ok := committed[x.key]; ok && x.at.Truncate(time.Millisecond).After(cp) {
				require.True(t, c.inFlight(x.worker, x.at, cp),
					"tool %s began on %s at %s, after its step was checkpointed at %s, and not as its frozen worker resumed", x.key, x.worker, x.at, cp)
			}
		} else {
			r.dones++
		}
	}
	require.Len(t, committed, len(byKey), "every tool call that ran was checkpointed once")
	repeated := 0
	for key, r := range byKey {
		require.GreaterOrEqual(t, r.dones, 1, "tool %s completed its effect", key)
		_, ok := committed[key]
		require.True(t, ok, "tool %s was checkpointed", key)
		if r.starts > 1 {
			repeated++
		}
	}

	// Answers: each recorded once (its wait's usage row, keyed by the
	// call); at most one message per call, consumed once (an answer that
	// woke a hibernated run that is not queued has none: its continuation
	// reads it from the session's pending call).
	var answers, messages, consumed, distinct int
	require.NoError(t, c.pool.QueryRow(ctx, `SELECT count(*) FROM helix.usage WHERE source_type = $1`,
		store.UsageClientToolWaitMS).Scan(&answers))
	require.Equal(t, 2*chaosSessionsOf(n, chaosHITL)+chaosSessionsOf(n, chaosLead), answers, "two answers per HITL session, one per lead's helper")
	require.NoError(t, c.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE consumed),
		count(DISTINCT (destination_uuid, topic)) FROM dbos.notifications WHERE starts_with(topic, $1)`, recv.TopicPrefix).
		Scan(&messages, &consumed, &distinct))
	require.LessOrEqual(t, messages, answers, "no message without its answer")
	require.Equal(t, messages, distinct, "one message per call")
	require.Equal(t, messages, consumed, "each consumed once")

	// Hibernation: waits of root runs that start at once hibernated and
	// were woken by their answers; none is left hibernated.
	var woken, wakes, hibernated int
	require.NoError(t, c.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE wakes > 0), COALESCE(sum(wakes), 0),
		count(*) FILTER (WHERE hibernated_at IS NOT NULL OR woken_at IS NOT NULL) FROM helix.runs`).Scan(&woken, &wakes, &hibernated))
	require.Zero(t, hibernated, "every run woke and completed")
	require.Positive(t, woken, "waits longer than %s hibernated", chaosHibernateAfter)
	// Nested: leads whose helper hibernated hibernated for it, and the
	// helper's end woke them. Only a lead that was not admitted through the
	// queue can: a queued lead's segment waits for its helper in place. Which
	// leads a queued worker claimed is the harness's randomness (a run saw
	// every lead claimed by one).
	var leadsWoken, leadsUnqueued int
	require.NoError(t, c.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE r.wakes > 0),
			count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM dbos.workflow_status w WHERE starts_with(w.workflow_uuid, r.workflow_id || '-seg-')))
		FROM helix.runs r JOIN helix.sessions s USING (session_id)
		WHERE s.agent_type = $1 AND s.parent_session_id IS NULL`, chaosLead).Scan(&leadsWoken, &leadsUnqueued))
	if leadsUnqueued > 0 {
		require.Positive(t, leadsWoken, "leads waiting for a helper waiting for a person hibernated and woke (%d leads not queued)", leadsUnqueued)
	}

	// Sessions' runs admitted through the queue (by the queued workers):
	// their segments' drivers (a segment's DBOS parent is its driver or
	// one of the driver's continuations, {driver}-wake-{n}), sub-agents'
	// runs aside (their parent's stream says subagent_start instead of
	// run_queued).
	var queued, byQueued int
	require.NoError(t, c.pool.QueryRow(ctx, `SELECT count(DISTINCT d.driver) FROM dbos.workflow_status w,
			LATERAL (SELECT regexp_replace(w.parent_workflow_id, '-wake-[0-9]+$', '') AS driver) d
		WHERE w.queue_name = $1 AND NOT EXISTS (SELECT 1 FROM helix.runs r JOIN helix.sessions s USING (session_id)
			WHERE r.workflow_id = d.driver AND s.parent_session_id IS NOT NULL)`,
		engine.DefaultQueueName).Scan(&queued))
	// Which sessions a queued worker started (a worker killed before it
	// claimed any starts none).
	require.NoError(t, c.pool.QueryRow(ctx, `SELECT count(*) FROM chaos_requests WHERE started AND claimed_by = ANY($1)`,
		c.queuedWorkers()).Scan(&byQueued))
	if byQueued > 0 {
		require.Positive(t, queued, "the queued workers admit their sessions through the queue")
	}
	require.Equal(t, queued, queuedChunks, "each queued run says so in its stream, once")

	c.mu.Lock()
	c.log = append(c.log, fmt.Sprintf("%d tool calls, %d run more than once (a kill landed before their checkpoint); %d stream resyncs; %d runs queued; "+
		"%d runs hibernated and woke (%d wakes); %d of %d leads not queued hibernated for their helper", len(byKey), repeated, resyncs, queued, woken, wakes,
		leadsWoken, leadsUnqueued))
	c.mu.Unlock()
}

// chaosSessionsOf is the number of sessions of kind among n.
func chaosSessionsOf(n int, kind string) int {
	i := slices.Index(chaosKinds, kind)
	return (n - i + len(chaosKinds) - 1) / len(chaosKinds)
}

// report logs (and writes to HELIX_CHAOS_REPORT) the takeover times.
func (c *chaos) report(n int) {
	t := c.t
	type takeover struct {
		Executor  string  `json:"executor"`
		Elsewhere bool    `json:"elsewhere"`
		By        string  `json:"takenOverBy,omitempty"`
		Seconds   float64 `json:"seconds,omitempty"`
		Nothing   bool    `json:"nothingPending,omitempty"`
	}
	var all []takeover
	var lease, here []float64
	for _, k := range c.kills {
		to := takeover{Executor: k.id, Elsewhere: k.elsewhere}
		var by *string
		var at *time.Time
		err := c.pool.QueryRow(t.Context(), `SELECT taken_over_by, taken_over_at FROM helix.executors WHERE executor_id = $1`,
			k.id).Scan(&by, &at)
		if !errors.Is(err, pgx.ErrNoRows) { // no row: killed before its engine launched
			require.NoError(t, err)
		}
		if by == nil {
			to.Nothing = true // it held no pending workflow when it died (or never launched)
		} else {
			to.By, to.Seconds = *by, at.Sub(k.at).Seconds()
			if k.elsewhere {
				lease = append(lease, to.Seconds)
			} else {
				here = append(here, to.Seconds)
			}
		}
		all = append(all, to)
	}
	var takenOver, fenced, rejoined int
	for _, w := range c.frozen {
		out := w.out.String()
		takenOver += strings.Count(out, "executor.taken_over")
		fenced += strings.Count(out, "run.taken_over")
		rejoined += strings.Count(out, "executor.rejoined")
	}
	zombie := fmt.Sprintf("%d frozen, taken over %d time(s), %d session loop(s) fenced, rejoined %d time(s)",
		len(c.frozen), takenOver, fenced, rejoined)
	summary := fmt.Sprintf("%d sessions, %d kills, %d answers submitted; %s; takeover after kill (lease %s): another machine %s; this machine %s; "+
		"zombie: %s; events: %s", n, len(c.kills), c.submits, c.tx, chaosLease, distribution(lease), distribution(here), zombie, c.events())
	t.Log(summary)
	if path := os.Getenv(chaosEnvReport); path != "" {
		b, err := json.MarshalIndent(map[string]any{"sessions": n, "leaseSeconds": chaosLease.Seconds(), "takeovers": all,
			"txTool": c.tx, "summary": summary}, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, b, 0o644))
	}
}

// distribution formats min/median/max of seconds.
func distribution(s []float64) string {
	if len(s) == 0 {
		return "none"
	}
	slices.Sort(s)
	return fmt.Sprintf("n=%d min %.2fs median %.2fs max %.2fs", len(s), s[0], s[len(s)/2], s[len(s)-1])
}

// chaosRef is what an uninterrupted run of a session leaves, with the
// session's ID replaced by <sid>.
type chaosRef struct {
	messages []string
	stream   []string // sorted: parallel tools finish in any order
	resyncs  int
	queued   int // run_queued chunks
}

// chaosReference runs one session of each kind without interruption, in
// this process.
func chaosReference(t *testing.T, server string) map[string]chaosRef {
	t.Helper()
	url := pgtest.NewURLOn(t, server)
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(t.Context(), chaosSchema)
	require.NoError(t, err)
	rig := &chaosRig{pool: pool, worker: "reference"}
	agents := rig.agents()
	e, err := engine.New(t.Context(), engine.Config{DatabaseURL: url, ExecutorID: "chaos-reference"})
	require.NoError(t, err)
	defer func() { require.NoError(t, e.Shutdown(context.Background())) }()
	for _, a := range agents {
		require.NoError(t, e.Register(a))
	}
	require.NoError(t, e.Launch(t.Context()))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ref := map[string]chaosRef{}
	for _, kind := range chaosKinds {
		sid := kind + "-ref"
		h, err := e.Execute(ctx, agents[kind], engine.Input{Message: "go"}, &engine.ExecuteOptions{SessionID: sid})
		require.NoError(t, err)
		res, err := h.Result(ctx)
		require.NoError(t, err)
		switch kind {
		case chaosHITL:
			require.Equal(t, helix.AgentSuspendedClientTool, res.Status, res.Error)
			answer, err := helix.ClientToolResult("h-ask", map[string]string{"answer": "yes"})
			require.NoError(t, err)
			for _, s := range []helix.ToolSubmission{answer, helix.Approve("h-pay", "ok")} {
				_, err := e.SubmitToolResult(ctx, sid, s)
				require.NoError(t, err)
			}
			res, err = h.Await(ctx)
			require.NoError(t, err)
		case chaosLead:
			require.Equal(t, helix.AgentSuspendedAwaitingChildren, res.Status, res.Error)
			_, err := e.SubmitToolResult(ctx, sid, helix.Approve("s-pay", "ok"))
			require.NoError(t, err)
			res, err = h.Await(ctx)
			require.NoError(t, err)
		}
		require.Equal(t, helix.AgentCompleted, res.Status, "%s: %s", kind, res.Error)
		st, err := postgres.New(pool)
		require.NoError(t, err)
		ref[kind] = chaosProjection(t, &crashDB{url: url, pool: pool, st: st}, sid)
		require.NoError(t, st.Close())
	}
	return ref
}

// chaosProjection reads a session's transcript and stream with its ID
// replaced by <sid>; stream_resync chunks are counted, not listed.
func chaosProjection(t *testing.T, d *crashDB, sid string) chaosRef {
	t.Helper()
	norm := func(s string) string { return strings.ReplaceAll(s, sid, "<sid>") }
	var r chaosRef
	for _, m := range d.messages(t, sid) {
		r.messages = append(r.messages, norm(fmt.Sprintf("%s %s %s", m.Role, m.ToolCallID, m.Content)))
	}
	chunks := d.chunks(t, sid)
	for i, c := range chunks {
		if i > 0 {
			require.Greater(t, c.Sequence, chunks[i-1].Sequence)
		}
		switch c.Chunk.ChunkType() {
		case helix.ChunkStreamResync:
			r.resyncs++
			continue
		case helix.ChunkRunQueued:
			// A queued worker's session: otherwise the same stream.
			r.queued++
			continue
		}
		r.stream = append(r.stream, norm(crashProjection(c)))
	}
	slices.Sort(r.stream)
	return r
}

// segmentSuffix ends the workflow ID of a queued run's segment
// (workflows.SegmentID).
var segmentSuffix = regexp.MustCompile(`-seg-[0-9]+$`)

// chaosCommittedTools maps each checkpointed tool step's idempotency key
// (workflow ID / tool call ID) to the time it was checkpointed.
func chaosCommittedTools(t *testing.T, pool *pgxpool.Pool) map[string]time.Time {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT workflow_id, output, 'portable_json', completed_at
		FROM helix.step_journal_records WHERE name = $1 AND error IS NULL`, steps.NameRunTool)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var wf, ser string
		var output *string
		var at int64
		require.NoError(t, rows.Scan(&wf, &output, &ser, &at))
		require.NotNil(t, output)
		raw := []byte(*output)
		if ser != "portable_json" {
			raw, err = base64.StdEncoding.DecodeString(*output)
			require.NoError(t, err)
		}
		var r steps.ToolResult
		require.NoError(t, json.Unmarshal(raw, &r))
		// A queued run's segment records its tools; the key names the
		// run's workflow, its driver.
		key := segmentSuffix.ReplaceAllString(wf, "") + "/" + r.ToolCallID
		_, dup := out[key]
		require.False(t, dup, "tool step %s checkpointed twice", key)
		out[key] = time.UnixMilli(at)
	}
	require.NoError(t, rows.Err())
	return out
}

// chaosPostgres is a Postgres container of the chaos test alone, on a
// fixed host port so that a restart keeps its URL.
type chaosPostgres struct {
	c   *tcpostgres.PostgresContainer
	url string
}

func startChaosPostgres(t *testing.T) *chaosPostgres {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	c, err := tcpostgres.Run(t.Context(), image(),
		tcpostgres.WithDatabase("postgres"), tcpostgres.WithUsername("postgres"), tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies(),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{network.MustParsePort("5432/tcp"): {{
				HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(port)}}}
		}),
	)
	if c != nil {
		testcontainers.CleanupContainer(t, c)
	}
	require.NoError(t, err)
	url, err := c.ConnectionString(t.Context(), "sslmode=disable")
	require.NoError(t, err)
	return &chaosPostgres{c: c, url: url}
}

// restart stops the server and starts it again on the same port. The stop
// is the image's: with postgres:16-alpine a fast shutdown (SIGINT: every
// session is cut with an error); with the locally built image, which sets
// no stop signal, SIGTERM (a smart shutdown, refusing new connections)
// then SIGKILL after the 2 s grace (every connection cut without a word,
// crash recovery at the start): the harsher case.
//
// Under CPU load Docker can answer the stop with "tried to kill container,
// but did not receive an exit event" while the kill is still under way
// (seen once in a loaded stress run): the restart then waits for the
// container to have exited before it starts it again.
func (p *chaosPostgres) restart(t *testing.T) {
	t.Helper()
	grace := 2 * time.Second
	if err := p.c.Stop(t.Context(), &grace); err != nil {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		require.NoError(t, retryReads(ctx, func() error {
			st, serr := p.c.State(ctx)
			switch {
			case serr != nil:
				return serr
			case st.Running:
				return fmt.Errorf("the container still runs after a failed stop (%w)", err)
			}
			return nil
		}), "Postgres's container exits after the stop")
	}
	require.NoError(t, p.c.Start(t.Context()))
	url, err := p.c.ConnectionString(t.Context(), "sslmode=disable")
	require.NoError(t, err)
	require.Equal(t, p.url, url, "the server came back on its port")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, retryReads(ctx, func() error {
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			err = conn.Close(ctx)
		}
		return err
	}), "Postgres accepts connections again")
}

func chaosEnvInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, name)
	require.Positive(t, n, name)
	return n
}

func chaosEnvDurationOr(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(cmp.Or(os.Getenv(name), def.String()))
	require.NoError(t, err, name)
	return d
}
