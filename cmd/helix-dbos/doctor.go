package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/helix-agents/helix-dbos/migrations"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// Statuses of a doctor check.
const (
	checkOK      = "ok"
	checkWarn    = "warn"
	checkFail    = "fail"
	checkSkipped = "skipped"
)

// doctorReport is what `doctor --json` prints.
type doctorReport struct {
	// OK is false when a check failed (the exit status is then 1).
	OK     bool          `json:"ok"`
	Checks []doctorCheck `json:"checks"`
	// Executors and Stuck detail the last two checks.
	Executors []executorInfo `json:"executors"`
	Stuck     []stuckSession `json:"stuck"`
}

type doctorCheck struct {
	Name    string `json:"name"` // database, migrations, dbos, executors, queues, sessions
	Title   string `json:"title"`
	Status  string `json:"status"` // ok, warn, fail, skipped
	Summary string `json:"summary"`
	// Problems are what is wrong, each with what to do.
	Problems []doctorProblem `json:"problems,omitempty"`
}

type doctorProblem struct {
	Subject string `json:"subject,omitempty"`
	Problem string `json:"problem"`
	Hint    string `json:"hint,omitempty"`
}

// stuckSession is an active session that nothing is running or will run.
type stuckSession struct {
	SessionID      string `json:"sessionId"`
	AgentType      string `json:"agentType"`
	RunID          string `json:"runId,omitempty"`
	RunStatus      string `json:"runStatus,omitempty"`
	WorkflowID     string `json:"workflowId,omitempty"`
	WorkflowStatus string `json:"workflowStatus,omitempty"`
	ExecutorID     string `json:"executorId,omitempty"`
	Problem        string `json:"problem"`
	Hint           string `json:"hint"`
}

func newDoctorCmd(g *globals) *cobra.Command {
	var (
		asJSON bool
		grace  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check the deployment: database, migrations, DBOS schema, executors, stuck sessions",
		Long: "Runs these checks and prints one line each (✓ ok, ! warning, ✗ problem), with what to do\n" +
			"about every problem:\n\n" +
			"  database     the database answers (with the round-trip time)\n" +
			"  migrations   every helix migration this binary knows is applied\n" +
			"  dbos         DBOS's system schema exists (an engine has run here)\n" +
			"  executors    the executors recorded in helix.executors (serve, resume and retry record\n" +
			"               themselves with a heartbeat): alive, stopped, dead or taken over (by whom);\n" +
			"               one that stopped or died with pending workflows that no live engine took\n" +
			"               over is a problem; an alive one that reads an older storage format level (an\n" +
			"               engine of an earlier release) is a warning: finish the rolling deploy\n" +
			"  sessions     no active session is stuck: its run has no workflow or its workflow ended,\n" +
			"               its executor is dead, or it waits for a tool call past the call's deadline\n\n" +
			"Exit status: 0 when nothing failed (warnings included), 1 otherwise. Reads only.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			url, err := g.requireDatabaseURL()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			emit := func(c doctorCheck) {
				if !asJSON {
					printCheck(out, c)
				}
			}
			rep := runDoctor(cmd.Context(), url, grace, emit)
			if asJSON {
				if err := printJSON(out, rep); err != nil {
					return err
				}
			}
			if rep.OK {
				return nil
			}
			failed := 0
			for _, c := range rep.Checks {
				if c.Status == checkFail {
					failed++
				}
			}
			return fmt.Errorf("doctor: %d check(s) failed", failed)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print JSON for scripts")
	f.DurationVar(&grace, "grace", time.Minute, "how long a run may lack a workflow, or a call outlive its deadline, before it counts as stuck")
	return cmd
}

// runDoctor runs the checks in order, passing each to emit as it is done.
func runDoctor(ctx context.Context, url string, grace time.Duration, emit func(doctorCheck)) *doctorReport {
	rep := &doctorReport{OK: true, Executors: []executorInfo{}, Stuck: []stuckSession{}}
	add := func(c doctorCheck) {
		rep.Checks = append(rep.Checks, c)
		if c.Status == checkFail {
			rep.OK = false
		}
		emit(c)
	}
	skipRest := func(why string, names ...string) {
		for _, n := range names {
			add(doctorCheck{Name: n, Title: checkTitles[n], Status: checkSkipped, Summary: why})
		}
	}
	start := time.Now()
	conn, err := connectDatabase(ctx, url)
	if err != nil {
		add(doctorCheck{Name: "database", Title: checkTitles["database"], Status: checkFail, Summary: describeDatabase(url),
			Problems: []doctorProblem{{Problem: err.Error(), Hint: "check --database-url / HELIX_DATABASE_URL, and that Postgres runs and accepts connections from here"}}})
		skipRest("no database", "migrations", "dbos", "executors", "queues", "sessions")
		return rep
	}
	defer conn.Close(context.WithoutCancel(ctx))
	connect := time.Since(start)
	rtt := time.Duration(1<<63 - 1)
	var version string
	for range 3 {
		t := time.Now()
		qctx, cancel := queryContext(ctx)
		var err error
		version, err = diagnostics(conn).ServerVersion(qctx)
		cancel()
		if err != nil {
			add(doctorCheck{Name: "database", Title: checkTitles["database"], Status: checkFail, Summary: describeDatabase(url),
				Problems: []doctorProblem{{Problem: queryError(ctx, "read the server version", err).Error()}}})
			skipRest("no database", "migrations", "dbos", "executors", "queues", "sessions")
			return rep
		}
		rtt = min(rtt, time.Since(t))
	}
	version, _, _ = strings.Cut(version, " ") // "15.18 (Debian 15.18-0+deb12u1)"
	add(doctorCheck{Name: "database", Title: checkTitles["database"], Status: checkOK,
		Summary: fmt.Sprintf("%s · PostgreSQL %s · connect %s · round trip %s", describeDatabase(url), version, fmtMillis(connect), fmtMillis(rtt))})

	// A query that times out closes the connection (pgx cannot tell what
	// the server still sends): the checks after it cannot run.
	lost := func(names ...string) bool {
		if conn.IsClosed() {
			skipRest("the database connection was lost (see above)", names...)
			return true
		}
		return false
	}
	helixOK := checkMigrations(ctx, conn, add)
	if lost("dbos", "executors", "queues", "sessions") {
		return rep
	}
	var dbosOK bool
	qctx, cancel := queryContext(ctx)
	exist, err := diagnostics(conn).RelationsExist(qctx, "dbos.workflow_status")
	cancel()
	if err == nil {
		dbosOK = exist[0]
	}
	if err != nil {
		add(doctorCheck{Name: "dbos", Title: checkTitles["dbos"], Status: checkFail, Problems: []doctorProblem{{Problem: queryError(ctx, "look for the dbos schema", err).Error()}}})
	} else if dbosOK {
		add(doctorCheck{Name: "dbos", Title: checkTitles["dbos"], Status: checkOK, Summary: "schema dbos"})
	} else {
		add(doctorCheck{Name: "dbos", Title: checkTitles["dbos"], Status: checkWarn, Summary: "no engine has run on this database yet",
			Problems: []doctorProblem{{Problem: "DBOS's system schema (dbos) is missing, so nothing has run here",
				Hint: "start an engine on this database (`helix-dbos serve --agents FILE`, or your process); if one runs, check --database-url: it must be the database your engines use"}}})
	}
	if !helixOK || !dbosOK {
		skipRest("needs the helix and dbos schemas", "executors", "queues", "sessions")
		return rep
	}
	execs, c := checkExecutors(ctx, conn)
	rep.Executors = execs
	add(c)
	if lost("queues", "sessions") {
		return rep
	}
	add(checkQueues(ctx, conn, execs))
	if lost("sessions") {
		return rep
	}
	stuck, c := checkSessions(ctx, conn, execs, grace)
	rep.Stuck = stuck
	add(c)
	return rep
}

var checkTitles = map[string]string{
	"database":   "database reachable",
	"migrations": "migrations current",
	"dbos":       "DBOS schema present",
	"executors":  "executors alive",
	"queues":     "queues served",
	"sessions":   "no stuck sessions",
}

// queueGrace is how old a queued workflow of a version no live engine runs
// may be before doctor reports it: an engine that adopts the version
// (engine.Config.AdoptVersions) makes it its own at its next sweep.
const queueGrace = 10 * time.Second

// checkQueues reports what waits in DBOS's queues, per queue and
// application version: a workflow waits for an engine of its version, so
// one whose version no live engine runs waits forever.
func checkQueues(ctx context.Context, conn *pgx.Conn, execs []executorInfo) doctorCheck {
	c := doctorCheck{Name: "queues", Title: checkTitles["queues"], Status: checkOK}
	qctx, cancel := queryContext(ctx)
	defer cancel()
	groups, err := diagnostics(conn).QueuedWorkflows(qctx)
	if err != nil {
		c.Status = checkFail
		c.Problems = []doctorProblem{{Problem: queryError(ctx, "count the queued workflows in dbos.workflow_status", err).Error()}}
		return c
	}
	served := map[string]bool{}
	for _, e := range execs {
		if e.Alive {
			served[e.ApplicationVersion] = true
		}
	}
	var parts []string
	for _, g := range groups {
		parts = append(parts, fmt.Sprintf("%s: %d queued of version %s (oldest %s)", g.Queue, g.Count, cmp.Or(g.Version, "-"), fmtAge(g.OldestWaitSeconds)))
		if (g.Version == "" && len(served) > 0) || served[g.Version] || g.OldestWaitSeconds < queueGrace.Seconds() {
			continue
		}
		c.Status = checkFail
		c.Problems = append(c.Problems, doctorProblem{Subject: g.Queue,
			Problem: fmt.Sprintf("%d workflow(s) of application version %q wait in queue %s (the oldest for %s), and no live engine runs that version",
				g.Count, g.Version, g.Queue, fmtAge(g.OldestWaitSeconds)),
			Hint: fmt.Sprintf("start an engine of application version %q, or give your engines of the new version "+
				"engine.Config.AdoptVersions listing %q (docs/operations.md, rolling deploys)", g.Version, g.Version)})
	}
	c.Summary = "nothing queued"
	if len(parts) > 0 {
		c.Summary = strings.Join(parts, "; ")
	}
	return c
}

// fmtAge formats an age in seconds: 7s, 5m, 2h13m.
func fmtAge(seconds float64) string {
	d := time.Duration(seconds * float64(time.Second))
	if d < time.Minute {
		return d.Round(time.Second).String()
	}
	return strings.TrimSuffix(d.Truncate(time.Minute).String(), "0s")
}

func fmtMillis(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64) + " ms"
}

// checkMigrations compares the applied helix migrations with those this
// binary embeds, reading goose's version table (migrations.Status would
// create the schema: doctor only reads). It reports whether the helix
// schema exists.
func checkMigrations(ctx context.Context, conn *pgx.Conn, add func(doctorCheck)) bool {
	c := doctorCheck{Name: "migrations", Title: checkTitles["migrations"]}
	known := map[int64]string{}
	_ = fs.WalkDir(migrations.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if v, err := strconv.ParseInt(strings.SplitN(path, "_", 2)[0], 10, 64); err == nil {
				known[v] = path
			}
		}
		return nil
	})
	fail := func(what string, err error) bool {
		c.Status, c.Problems = checkFail, []doctorProblem{{Problem: queryError(ctx, what, err).Error()}}
		add(c)
		return false
	}
	qctx, cancel := queryContext(ctx)
	defer cancel()
	exist, err := diagnostics(conn).RelationsExist(qctx, migrations.VersionTable)
	if err != nil {
		return fail("look for the migrations table", err)
	}
	if !exist[0] {
		c.Status, c.Summary = checkFail, "the helix schema is missing"
		c.Problems = []doctorProblem{{Problem: "no helix migration is applied", Hint: "run `helix-dbos migrate up` (an engine also migrates when it launches), or check --database-url"}}
		add(c)
		return false
	}
	qctx, cancel = queryContext(ctx)
	defer cancel()
	applied, err := diagnostics(conn).AppliedMigrations(qctx, migrations.VersionTable)
	if err != nil {
		return fail("read the applied migrations", err)
	}
	var pending, unknown []string
	for _, v := range slices.Sorted(func(yield func(int64) bool) {
		for v := range known {
			if !yield(v) {
				return
			}
		}
	}) {
		if !slices.Contains(applied, v) {
			pending = append(pending, known[v])
		}
	}
	for _, v := range applied {
		if _, ok := known[v]; !ok {
			unknown = append(unknown, strconv.FormatInt(v, 10))
		}
	}
	c.Status, c.Summary = checkOK, fmt.Sprintf("%d of %d applied", len(known)-len(pending), len(known))
	if len(pending) > 0 {
		c.Status = checkFail
		c.Problems = append(c.Problems, doctorProblem{Problem: fmt.Sprintf("%d pending: %s", len(pending), strings.Join(pending, ", ")),
			Hint: "run `helix-dbos migrate up` (safe while engines run; an engine also migrates when it launches)"})
	}
	if len(unknown) > 0 {
		if c.Status == checkOK {
			c.Status = checkWarn
		}
		c.Problems = append(c.Problems, doctorProblem{Problem: "the database has migrations this binary does not know (version " + strings.Join(unknown, ", ") + ")",
			Hint: "a newer helix-dbos migrated it: use that version of the CLI"})
	}
	add(c)
	return true
}

// takeoverGrace is how long past its lease a dead executor may keep its
// pending workflows before doctor reports it: a live engine's takeover
// sweep claims it within a few seconds.
const takeoverGrace = 15 * time.Second

// checkExecutors lists the executors and fails on a dead one that still
// owns workflows.
func checkExecutors(ctx context.Context, conn *pgx.Conn) ([]executorInfo, doctorCheck) {
	c := doctorCheck{Name: "executors", Title: checkTitles["executors"], Status: checkOK}
	list, err := readExecutors(ctx, conn)
	if err != nil {
		c.Status, c.Problems = checkFail, []doctorProblem{{Problem: err.Error()}}
		return []executorInfo{}, c
	}
	var alive, dead, silent, takenOver, older []string
	for _, e := range list {
		switch {
		case e.Alive:
			alive = append(alive, describeExecutor(e))
			if e.FormatLevel < int(postgres.FormatLevelNewest) {
				older = append(older, fmt.Sprintf("%s (level %d, version %s, pid %d on %s)", e.ExecutorID, e.FormatLevel,
					e.ApplicationVersion, e.PID, e.Hostname))
			}
		case e.State == stateTakenOver && e.RecoveryError != "":
			dead = append(dead, e.ExecutorID)
			c.Problems = append(c.Problems, doctorProblem{Subject: e.ExecutorID,
				Problem: fmt.Sprintf("claimed by %s at %s, but recovering its workflows failed: %s", e.TakenOverBy, fmtTime(*e.TakenOverAt), e.RecoveryError),
				Hint:    fmt.Sprintf("%s retries at every takeover sweep (a couple of seconds); if it persists, check that engine's log", e.TakenOverBy)})
		case e.State == stateTakenOver:
			takenOver = append(takenOver, e.ExecutorID+" "+describeState(e))
		case e.Heartbeat && e.PendingWorkflows > 0 && (e.State == stateStopped || e.HeartbeatAge > e.LeaseSeconds+takeoverGrace.Seconds()):
			dead = append(dead, e.ExecutorID)
			how := fmt.Sprintf("dead (last heartbeat %s ago, lease %s, pid %d on %s)", fmtAge(e.HeartbeatAge), fmtAge(e.LeaseSeconds), e.PID, e.Hostname)
			if e.State == stateStopped {
				how = fmt.Sprintf("stopped at %s (pid %d on %s)", fmtTime(*e.StoppedAt), e.PID, e.Hostname)
			}
			c.Problems = append(c.Problems, doctorProblem{Subject: e.ExecutorID,
				Problem: fmt.Sprintf("%s with %d pending workflow(s), not taken over", how, e.PendingWorkflows),
				Hint: fmt.Sprintf("a live engine of application version %s (or one that adopts it: engine.Config.AdoptVersions) takes its sessions "+
					"over within seconds: start one (`helix-dbos serve --agents FILE`, or your process with an engine), or restart the process with executor ID %s",
					e.ApplicationVersion, e.ExecutorID)})
		case !e.Heartbeat && e.PendingWorkflows > 0:
			silent = append(silent, fmt.Sprintf("%s (%d pending workflow(s))", cmp.Or(e.ExecutorID, `""`), e.PendingWorkflows))
		}
	}
	switch {
	case len(dead) > 0:
		c.Status = checkFail
		c.Summary = fmt.Sprintf("%d alive, %d dead with pending workflows", len(alive), len(dead))
	case len(alive) == 0 && len(silent) == 0:
		c.Status, c.Summary = checkWarn, "none alive: no engine runs here now"
		c.Problems = append(c.Problems, doctorProblem{Problem: "no executor has a fresh heartbeat in helix.executors",
			Hint: "start one (`helix-dbos serve --agents FILE`, or your own process with an engine): every launched engine records a heartbeat"})
	default:
		c.Summary = fmt.Sprintf("%d alive", len(alive))
		if len(alive) > 0 {
			c.Summary += ": " + strings.Join(alive, "; ")
		}
	}
	if len(takenOver) > 0 {
		c.Summary += "; " + strings.Join(takenOver, "; ")
	}
	if len(older) > 0 {
		if c.Status == checkOK {
			c.Status = checkWarn
		}
		c.Problems = append(c.Problems, doctorProblem{
			Problem: fmt.Sprintf("alive but reading storage formats up to level %s only, which holds every engine at that level "+
				"(this release writes level %d): %s", olderLevel(list), postgres.FormatLevelNewest, strings.Join(older, ", ")),
			Hint: "an engine of an earlier release: finish the rolling deploy (stop the old replicas once the new ones run); " +
				"the engines write the newest formats within seconds of the last one's stop (docs/operations.md, rolling deploys)"})
	}
	if len(silent) > 0 {
		if c.Status == checkOK {
			c.Status = checkWarn
		}
		c.Problems = append(c.Problems, doctorProblem{Problem: "own pending workflows but record no heartbeat: " + strings.Join(silent, ", "),
			Hint: "no helix.executors row has these executor IDs (an engine from before heartbeats, or one of another application): a live engine of the same application and version adopts them within a minute; otherwise start a process with each of these executor IDs"})
	}
	return list, c
}

// olderLevel returns the lowest storage format level of the alive
// executors in list.
func olderLevel(list []executorInfo) string {
	level := int(postgres.FormatLevelNewest)
	for _, e := range list {
		if e.Alive {
			level = min(level, e.FormatLevel)
		}
	}
	return strconv.Itoa(level)
}

func describeExecutor(e executorInfo) string {
	return fmt.Sprintf("%s (pid %d on %s, heartbeat %s ago, %d pending workflow(s))", e.ExecutorID, e.PID, e.Hostname,
		fmtAge(e.HeartbeatAge), e.PendingWorkflows)
}

// checkSessions finds active sessions that nothing runs.
func checkSessions(ctx context.Context, conn *pgx.Conn, execs []executorInfo, grace time.Duration) ([]stuckSession, doctorCheck) {
	c := doctorCheck{Name: "sessions", Title: checkTitles["sessions"], Status: checkOK}
	fail := func(what string, err error) ([]stuckSession, doctorCheck) {
		c.Status, c.Problems = checkFail, []doctorProblem{{Problem: queryError(ctx, what, err).Error()}}
		return []stuckSession{}, c
	}
	const readSessions = "read the active sessions and their runs"
	dead := map[string]executorInfo{}
	for _, e := range execs {
		if e.Heartbeat && !e.Alive {
			dead[e.ExecutorID] = e
		}
	}
	qctx, cancel := queryContext(ctx)
	defer cancel()
	sessions, err := diagnostics(conn).ActiveSessions(qctx, grace)
	if err != nil {
		return fail(readSessions, err)
	}
	stuck := []stuckSession{}
	active, hibernated := 0, 0
	for _, a := range sessions {
		active++
		if a.HibernatedAt != nil {
			hibernated++
		}
		s := stuckSession{SessionID: a.SessionID, AgentType: a.AgentType, RunID: a.RunID, RunStatus: a.RunStatus,
			WorkflowID: a.WorkflowID, WorkflowStatus: a.WorkflowStatus, ExecutorID: a.ExecutorID}
		old, overdue := a.Quiet, a.OverdueCalls
		id := s.SessionID
		abortRetry := fmt.Sprintf("`helix-dbos abort %s` fails it, then `helix-dbos retry %s --agents FILE` runs it again", id, id)
		engineHint := fmt.Sprintf("every launched engine that defines agent %s does it within its recorded-run sweep interval (5 s by default): start one (`helix-dbos serve --agents FILE`)", s.AgentType)
		switch {
		case s.RunID == "":
			s.Problem = "active, but it has no run: nothing will run it"
			s.Hint = fmt.Sprintf("inspect it with `helix-dbos sessions show %s`", id)
		case a.HibernatedAt != nil:
			// It waits for people with no workflow running it: not stuck,
			// unless a deadline passed and no engine woke it.
			if overdue == "" {
				continue
			}
			s.Problem = fmt.Sprintf("its run %s, hibernated since %s, waits for tool call(s) past their deadline: %s; no engine woke it",
				s.RunID, fmtTime(*a.HibernatedAt), overdue)
			s.Hint = "an engine wakes it at its deadline: " + engineHint
		case a.WokenAt != nil && s.WorkflowStatus == "":
			if !a.WokenQuiet {
				continue // woken: its continuation is being started
			}
			s.Problem = fmt.Sprintf("its run %s was woken from hibernation at %s, but its continuation %s has not started",
				s.RunID, fmtTime(*a.WokenAt), s.WorkflowID)
			s.Hint = "an engine starts it: " + engineHint
		case s.WorkflowID == "":
			if !old {
				continue
			}
			s.Problem = fmt.Sprintf("its run %s (%s) has no workflow", s.RunID, s.RunStatus)
			s.Hint = fmt.Sprintf("inspect it with `helix-dbos sessions runs %s`", id)
		case s.WorkflowStatus == "":
			if !old {
				continue // the workflow is being started
			}
			s.Problem = fmt.Sprintf("its run %s was recorded but its workflow %s never started (a process died in between)", s.RunID, s.WorkflowID)
			s.Hint = fmt.Sprintf("the next engine that launches starts it: start a process that defines agent %s (`helix-dbos serve --agents FILE`)", s.AgentType)
		case !slices.Contains([]string{"PENDING", "ENQUEUED", "DELAYED"}, s.WorkflowStatus):
			s.Problem = fmt.Sprintf("its workflow %s ended %s, but the session is still active", s.WorkflowID, s.WorkflowStatus)
			s.Hint = abortRetry
		case dead[s.ExecutorID].Heartbeat:
			e := dead[s.ExecutorID]
			s.Problem = fmt.Sprintf("its workflow %s belongs to executor %s, which is dead (last heartbeat %s ago)", s.WorkflowID, s.ExecutorID,
				fmtAge(e.HeartbeatAge))
			s.Hint = fmt.Sprintf("a live engine of application version %s takes it over within seconds: start one (`helix-dbos serve --agents FILE`), "+
				"or restart the process with executor ID %s; or %s", e.ApplicationVersion, s.ExecutorID, abortRetry)
		case overdue != "":
			s.Problem = fmt.Sprintf("its run %s (%s) waits for tool call(s) past their deadline: %s; the run should have timed them out", s.RunID, s.RunStatus, overdue)
			s.Hint = fmt.Sprintf("make sure a process with executor ID %s runs (it times the calls out when it recovers the run), or answer them (`helix-dbos submit %s <call> ...`), or %s",
				cmp.Or(s.ExecutorID, "?"), id, abortRetry)
		default:
			continue
		}
		stuck = append(stuck, s)
	}
	qctx, cancel = queryContext(ctx)
	defer cancel()
	interrupted, err := diagnostics(conn).CountSessions(qctx, "interrupted")
	if err != nil {
		return fail("count the interrupted sessions", err)
	}
	c.Summary = fmt.Sprintf("%d active", active)
	if len(stuck) > 0 {
		c.Status = checkFail
		c.Title = "stuck sessions"
		c.Summary = fmt.Sprintf("%d stuck of %d active", len(stuck), active)
		for _, s := range stuck {
			c.Problems = append(c.Problems, doctorProblem{Subject: s.SessionID, Problem: s.Problem, Hint: s.Hint})
		}
	}
	if hibernated > 0 {
		c.Summary += fmt.Sprintf(" (%d hibernated: waiting for people with no workflow running)", hibernated)
	}
	if interrupted > 0 {
		c.Summary += fmt.Sprintf(", %d interrupted (waiting for `helix-dbos resume <session>`: `helix-dbos sessions list --status interrupted`)", interrupted)
	}
	return stuck, c
}

// maxProblems bounds the problems printed per check (--json has them all).
const maxProblems = 20

func printCheck(out io.Writer, c doctorCheck) {
	mark := map[string]string{checkOK: "✓", checkWarn: "!", checkFail: "✗", checkSkipped: "-"}[c.Status]
	line := fmt.Sprintf("%s %-20s", mark, c.Title)
	if c.Summary != "" {
		line += " " + c.Summary
	}
	fmt.Fprintln(out, strings.TrimRight(line, " "))
	for i, p := range c.Problems {
		if i == maxProblems {
			fmt.Fprintf(out, "    … and %d more (--json lists them all)\n", len(c.Problems)-maxProblems)
			break
		}
		text := p.Problem
		if p.Subject != "" {
			text = p.Subject + ": " + text
		}
		fmt.Fprintf(out, "    %s\n", text)
		if p.Hint != "" {
			fmt.Fprintf(out, "      → %s\n", p.Hint)
		}
	}
}
