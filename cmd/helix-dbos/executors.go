package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/helix-agents/helix-dbos/store/postgres"
)

// States of an executor (executorInfo.State).
const (
	stateAlive     = "alive"
	stateStopped   = "stopped"
	stateDead      = "dead"
	stateTakenOver = "taken-over"
	// stateUnrecorded is an executor ID that owns pending workflows in
	// dbos.workflow_status but has no row in helix.executors.
	stateUnrecorded = "unrecorded"
)

// executorInfo is one executor: a heartbeat row of helix.executors, the
// workflows DBOS holds for it, or both. `executors --json` prints a list
// of them, `doctor --json` too.
type executorInfo struct {
	ExecutorID string `json:"executorId"`
	// Heartbeat is false for an executor known only from its workflows
	// (an engine from before heartbeats, or of another application).
	Heartbeat          bool       `json:"heartbeat"`
	Alive              bool       `json:"alive"`
	Hostname           string     `json:"hostname,omitempty"`
	PID                int        `json:"pid,omitempty"`
	ApplicationVersion string     `json:"applicationVersion,omitempty"`
	StartedAt          *time.Time `json:"startedAt,omitempty"`
	HeartbeatAt        *time.Time `json:"heartbeatAt,omitempty"`
	// HeartbeatAge is the time since the last heartbeat, in seconds.
	HeartbeatAge float64 `json:"heartbeatAgeSeconds,omitempty"`
	// LeaseSeconds is the executor's lease: it is dead once its heartbeat
	// is older than that.
	LeaseSeconds float64 `json:"leaseSeconds,omitempty"`
	// State is alive, stopped (a clean shutdown), dead (its lease expired),
	// taken-over (a live engine recovered its sessions) or unrecorded (known
	// only from its workflows).
	State     string     `json:"state"`
	StoppedAt *time.Time `json:"stoppedAt,omitempty"`
	// TakenOverBy and TakenOverAt record which live engine claimed the
	// executor's sessions, and when; RecoveredAt when it re-enqueued its
	// RecoveredWorkflows; RecoveryError the last failed attempt.
	TakenOverBy        string     `json:"takenOverBy,omitempty"`
	TakenOverAt        *time.Time `json:"takenOverAt,omitempty"`
	RecoveredAt        *time.Time `json:"recoveredAt,omitempty"`
	RecoveredWorkflows int        `json:"recoveredWorkflows,omitempty"`
	RecoveryError      string     `json:"recoveryError,omitempty"`
	// FormatLevel is the storage format level its engine reads
	// (postgres.FormatLevel; 0 for an engine of a release before the
	// levels): the engines write at the lowest level of the alive ones.
	FormatLevel int `json:"formatLevel"`
	// PendingWorkflows are the workflows DBOS would recover for it
	// (PENDING, ENQUEUED or DELAYED).
	PendingWorkflows int `json:"pendingWorkflows"`
	// SessionsOwned counts the helix sessions whose current run's workflow
	// is PENDING under this executor: those it runs (or waits in), and
	// those whoever takes it over resumes.
	SessionsOwned int `json:"sessionsOwned"`
	// QueueSlots counts, per DBOS queue, the PENDING workflows it took from
	// that queue. Workflows recovered by a takeover come from DBOS's
	// internal queue, _dbos_internal_queue.
	QueueSlots map[string]int `json:"queueSlots"`
}

func newExecutorsCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "executors",
		Short: "List the executors: alive, stopped, dead or taken over, with the sessions and queue slots each holds",
		Long: "Lists every executor recorded in helix.executors (every launched engine records its executor ID\n" +
			"with a heartbeat), and every executor ID that owns pending DBOS workflows without a row, alive\n" +
			"ones first, then by ID:\n\n" +
			"  VERSION      the application version its engine runs (it recovers only workflows of it)\n" +
			"  HOST, PID    where its process runs\n" +
			"  STARTED      when that process claimed the executor ID\n" +
			"  FORMAT       the storage format level its engine reads (0: a release before the levels); the\n" +
			"               engines write at the lowest level of the alive executors\n" +
			"  HEARTBEAT    the age of its last heartbeat; LEASE: it is dead once that is older than this\n" +
			"  WORKFLOWS    its pending DBOS workflows (PENDING, ENQUEUED or DELAYED)\n" +
			"  SESSIONS     the helix sessions whose current run's workflow is PENDING under it\n" +
			"  QUEUE SLOTS  its PENDING workflows taken from a DBOS queue, per queue (workflows recovered\n" +
			"               by a takeover come from _dbos_internal_queue)\n" +
			"  STATE        alive; stopped (a clean shutdown); dead (its lease expired); taken over by X at\n" +
			"               T, with the workflows recovered or the recovery error; unrecorded (no row)\n\n" +
			"`helix-dbos doctor` says which of them is a problem. Reads only.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			url, err := g.requireDatabaseURL()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			conn, err := connectDatabase(ctx, url)
			if err != nil {
				return err
			}
			defer conn.Close(context.WithoutCancel(ctx))
			list, err := listExecutors(ctx, conn)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), list)
			}
			return printExecutors(cmd.OutOrStdout(), list)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

// errNoExecutorsTable is the error of a database without helix.executors.
var errNoExecutorsTable = errors.New("helix.executors is missing (the helix schema is not migrated): " +
	"run `helix-dbos migrate up` against this database (an engine also migrates when it launches), or check --database-url")

// listExecutors reads the executors for the command. Without DBOS's schema
// no engine has run, so there are none.
func listExecutors(ctx context.Context, conn *pgx.Conn) ([]executorInfo, error) {
	qctx, cancel := queryContext(ctx)
	exist, err := diagnostics(conn).RelationsExist(qctx, "helix.executors", "dbos.workflow_status")
	cancel()
	switch {
	case err != nil:
		return nil, queryError(ctx, "look for the helix and dbos schemas", err)
	case !exist[0]:
		return nil, errNoExecutorsTable
	case !exist[1]:
		return []executorInfo{}, nil
	}
	return readExecutors(ctx, conn)
}

// diagnostics returns the store's diagnostic queries over conn.
func diagnostics(conn *pgx.Conn) *postgres.Diagnostics {
	return postgres.NewDiagnostics(postgres.PgxQuerier(conn))
}

// readExecutors reads every executor, alive ones first, then by ID: each
// executor of the cluster (the store's ReadCluster) with its state and what
// a takeover recorded, and each executor ID that owns pending workflows in
// dbos.workflow_status without a row (unrecorded); with the workflows,
// sessions and queue slots each holds. Both schemas must exist. Its errors
// say which read failed.
func readExecutors(ctx context.Context, conn *pgx.Conn) ([]executorInfo, error) {
	const readRows, readOwned = "read helix.executors", "count the pending workflows in dbos.workflow_status"
	d := diagnostics(conn)
	qctx, cancel := queryContext(ctx)
	defer cancel()
	cluster, err := d.ReadCluster(qctx, &postgres.ClusterOptions{SessionsPerExecutor: 1})
	if err != nil {
		return nil, queryError(ctx, readRows, err)
	}
	qctx, cancel = queryContext(ctx)
	defer cancel()
	takeovers, err := d.ExecutorTakeovers(qctx)
	if err != nil {
		return nil, queryError(ctx, readRows, err)
	}
	byID := map[string]*executorInfo{}
	for _, x := range cluster.Executors {
		started, beat := x.StartedAt, x.HeartbeatAt
		e := &executorInfo{ExecutorID: x.ExecutorID, Heartbeat: true, Alive: x.Alive, Hostname: x.Hostname, PID: x.PID,
			ApplicationVersion: x.ApplicationVersion, StartedAt: &started, HeartbeatAt: &beat, StoppedAt: x.StoppedAt,
			TakenOverBy: x.TakenOverBy, FormatLevel: int(x.FormatLevel), LeaseSeconds: x.LeaseExpiresAt.Sub(x.HeartbeatAt).Seconds()}
		switch {
		case e.TakenOverBy != "":
			e.State = stateTakenOver
		case e.StoppedAt != nil:
			e.State = stateStopped
		case e.Alive:
			e.State = stateAlive
		default:
			e.State = stateDead
		}
		byID[e.ExecutorID] = e
	}
	for _, t := range takeovers {
		if e, ok := byID[t.ExecutorID]; ok {
			e.HeartbeatAge = t.HeartbeatAge.Seconds()
			e.TakenOverAt, e.RecoveredAt, e.RecoveredWorkflows, e.RecoveryError = t.TakenOverAt, t.RecoveredAt, t.RecoveredWorkflows, t.RecoveryError
		}
	}
	qctx, cancel = queryContext(ctx)
	defer cancel()
	pending, err := d.PendingWorkflows(qctx)
	if err != nil {
		return nil, queryError(ctx, readOwned, err)
	}
	for _, w := range pending {
		e, ok := byID[w.ExecutorID]
		if !ok {
			e = &executorInfo{ExecutorID: w.ExecutorID, State: stateUnrecorded}
			byID[w.ExecutorID] = e
		}
		e.PendingWorkflows += w.Pending
		e.SessionsOwned += w.Sessions
		if w.Queue != "" && w.Running > 0 {
			if e.QueueSlots == nil {
				e.QueueSlots = map[string]int{}
			}
			e.QueueSlots[w.Queue] = w.Running
		}
	}
	list := make([]executorInfo, 0, len(byID))
	for _, e := range byID {
		if e.QueueSlots == nil {
			e.QueueSlots = map[string]int{}
		}
		list = append(list, *e)
	}
	slices.SortFunc(list, func(a, b executorInfo) int {
		if a.Alive != b.Alive {
			if a.Alive {
				return -1
			}
			return 1
		}
		return strings.Compare(a.ExecutorID, b.ExecutorID)
	})
	return list, nil
}

// printExecutors prints the executors as a table.
func printExecutors(out io.Writer, list []executorInfo) error {
	if len(list) == 0 {
		fmt.Fprintln(out, "no executors")
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "EXECUTOR\tVERSION\tHOST\tPID\tSTARTED\tFORMAT\tHEARTBEAT\tLEASE\tWORKFLOWS\tSESSIONS\tQUEUE SLOTS\tSTATE")
	for _, e := range list {
		pid, started, format, beat, lease := "-", "-", "-", "-", "-"
		if e.PID != 0 {
			pid = strconv.Itoa(e.PID)
		}
		if e.Heartbeat {
			started, beat, lease = fmtTime(*e.StartedAt), fmtAge(e.HeartbeatAge)+" ago", fmtAge(e.LeaseSeconds)
			format = strconv.Itoa(e.FormatLevel)
		}
		var slots []string
		for _, q := range slices.Sorted(maps.Keys(e.QueueSlots)) {
			slots = append(slots, fmt.Sprintf("%s=%d", q, e.QueueSlots[q]))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", cmp.Or(e.ExecutorID, `""`), cmp.Or(e.ApplicationVersion, "-"),
			cmp.Or(e.Hostname, "-"), pid, started, format, beat, lease, e.PendingWorkflows, e.SessionsOwned,
			cmp.Or(strings.Join(slots, ","), "-"), describeState(e))
	}
	return w.Flush()
}

// describeState says what an executor's state is: its name, or for one
// taken over, by whom, when, and how its recovery went.
func describeState(e executorInfo) string {
	if e.State != stateTakenOver {
		return e.State
	}
	s := "taken over by " + e.TakenOverBy
	if e.TakenOverAt != nil {
		s += " at " + fmtTime(*e.TakenOverAt)
	}
	switch {
	case e.RecoveryError != "":
		return s + ", recovery failed: " + e.RecoveryError
	case e.RecoveredAt != nil:
		return s + fmt.Sprintf(" (%d workflow(s) recovered)", e.RecoveredWorkflows)
	default:
		return s + ", recovering its workflows"
	}
}
