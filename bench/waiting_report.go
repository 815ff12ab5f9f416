package bench

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// WaitingReport is the outcome of Waiting: what sessions waiting for a
// person cost the process that runs them, the database, and a restart, and
// how fast they wake and drain once answered.
type WaitingReport struct {
	Machine Machine             `json:"machine"`
	Config  WaitingReportConfig `json:"config"`
	// Idle is worker A launched, before any session; Waiting is worker A
	// with every session waiting live (zero when the sessions hibernate
	// and some hibernated before all of them waited: see
	// Hibernation.LiveCaught).
	Idle    WorkerFootprint `json:"idle"`
	Waiting WorkerFootprint `json:"waiting,omitzero"`
	// PerSession is the growth from Idle to Waiting, and of the database
	// (once every session suspended), per waiting session.
	PerSession PerWaitingSession `json:"perSession"`
	Database   WaitingDatabase   `json:"database"`
	Start      WaitingStart      `json:"start"`
	// Hibernation is worker A with every session hibernated: set when the
	// sessions hibernate (Config.HibernateAfter is not "never").
	Hibernation *WaitingHibernation `json:"hibernation,omitempty"`
	Restart     WaitingRestart      `json:"restart"`
	// Drained reports whether the wake and drain phases ran: false with
	// WaitingConfig.NoDrain, the sessions left waiting, Wake and Drain
	// omitted.
	Drained bool           `json:"drained"`
	Wake    WaitingWake    `json:"wake,omitzero"`
	Drain   WaitingDrain   `json:"drain,omitzero"`
	Outcome WaitingOutcome `json:"outcome"`
	// DurationS is how long Waiting took.
	DurationS float64 `json:"durationS"`
}

// WaitingReportConfig is the configuration a waiting-sessions report was
// measured with.
type WaitingReportConfig struct {
	Sessions    int `json:"sessions"`
	WakeSamples int `json:"wakeSamples"`
	Callers     int `json:"callers"`
	// Starters is how many sessions the worker started at once.
	Starters int `json:"starters"`
	// HibernateAfter is the workers' engine.Config.HibernateAfter (a Go
	// duration), or "never": the sessions wait live in the worker.
	HibernateAfter string `json:"hibernateAfter"`
	// ApproveVia is the approvals' route: ApproveViaClient (an
	// engine.Client in the bench process) or ApproveViaEngine (worker B's
	// engine).
	ApproveVia string `json:"approveVia"`
}

// WorkerFootprint is a worker process's footprint after a forced GC that
// returned the freed memory to the system.
type WorkerFootprint struct {
	// RSSBytes is the resident set (VmRSS of /proc/<pid>/status).
	RSSBytes int64 `json:"rssBytes"`
	// Goroutines is runtime.NumGoroutine.
	Goroutines int `json:"goroutines"`
	// HeapInuseBytes and StackInuseBytes are the Go runtime's
	// MemStats.HeapInuse and StackInuse.
	HeapInuseBytes  uint64 `json:"heapInuseBytes"`
	StackInuseBytes uint64 `json:"stackInuseBytes"`
}

// PerWaitingSession is a footprint's growth over an idle worker's, and the
// database's, divided by the sessions waiting.
type PerWaitingSession struct {
	RSSBytes   float64 `json:"rssBytes"`
	Goroutines float64 `json:"goroutines"`
	HeapBytes  float64 `json:"heapBytes"`
	StackBytes float64 `json:"stackBytes"`
	// DatabaseBytes is the growth of the helix and dbos tables (with
	// indexes and TOAST) per session; zero where not measured.
	DatabaseBytes float64 `json:"databaseBytes,omitempty"`
}

// WaitingDatabase is the total size of the helix and dbos tables before the
// sessions, with all of them waiting (suspended), and with all of them
// hibernated (when they hibernate).
type WaitingDatabase struct {
	BytesBefore     int64 `json:"bytesBefore"`
	BytesWaiting    int64 `json:"bytesWaiting"`
	BytesHibernated int64 `json:"bytesHibernated,omitempty"`
	// Relations is the growth of each helix and dbos table from before the
	// sessions to the moment all of them waited (hibernated, when they
	// hibernate), per session, largest first: where the per-session bytes
	// go.
	Relations []RelationGrowth `json:"relations,omitempty"`
}

// RelationGrowth is one table's growth per waiting session: its rows, its
// heap (with the free space and dead tuples it holds), its indexes (each
// by name) and its TOAST.
type RelationGrowth struct {
	Table      string             `json:"table"`
	Rows       float64            `json:"rows"`
	DeadRows   float64            `json:"deadRows"`
	Bytes      float64            `json:"bytes"`
	HeapBytes  float64            `json:"heapBytes"`
	IndexBytes float64            `json:"indexBytes"`
	ToastBytes float64            `json:"toastBytes"`
	Indexes    map[string]float64 `json:"indexes,omitempty"`
}

// WaitingHibernation is worker A once every session's run hibernated: its
// workflow ended, no goroutine of A waits for the answer.
type WaitingHibernation struct {
	// LiveCaught reports whether every session waited live in A when the
	// last one suspended, and WaitingReport.Waiting was read then.
	LiveCaught bool `json:"liveCaught"`
	// Hibernated counts the runs hibernated, their workflows SUCCESS;
	// WallS is the time from every session suspended to that.
	Hibernated int     `json:"hibernated"`
	WallS      float64 `json:"wallS"`
	// Footprint is worker A's then, LiveWaits the waits it still held
	// (Engine.WaitsForAnswer; 0); PerSession the growth over A's idle
	// footprint, and of the database, per hibernated session.
	Footprint  WorkerFootprint   `json:"footprint"`
	LiveWaits  int               `json:"liveWaits"`
	PerSession PerWaitingSession `json:"perSession"`
}

// WaitingStart is the time from the start request to every session
// waiting for its approval.
type WaitingStart struct {
	WallS             float64 `json:"wallS"`
	SessionsPerSecond float64 `json:"sessionsPerSecond"`
}

// WaitingRestart is worker A killed (SIGKILL) and worker B launched with
// its executor ID, recovering the waiting sessions.
type WaitingRestart struct {
	// IdleLaunchMS is worker A's Engine.Launch, with nothing to recover;
	// LaunchMS is worker B's, which recovers every session.
	IdleLaunchMS float64 `json:"idleLaunchMs"`
	LaunchMS     float64 `json:"launchMs"`
	// RecoveredS is the time from B's Launch returning to every session
	// waiting again in B; Recovered counts them (both 0 when the sessions
	// hibernated: B recovers none).
	RecoveredS float64 `json:"recoveredS"`
	Recovered  int     `json:"recovered"`
	// Replayed counts the sessions whose wait B holds once settled
	// (Engine.WaitsForAnswer): all of them recovered, or 0 when they
	// hibernated. Hibernated counts the runs still hibernated then, their
	// workflows SUCCESS (when they hibernate).
	Replayed   int `json:"replayed"`
	Hibernated int `json:"hibernated,omitempty"`
	// SettledS is the further time until B's goroutine count held still.
	SettledS float64 `json:"settledS"`
	// Footprint is worker B's then; PerSession its growth over worker A's
	// idle footprint, per session.
	Footprint  WorkerFootprint   `json:"footprint"`
	PerSession PerWaitingSession `json:"perSession"`
	// ReplayedModelCalls counts the model calls B made for step 1, which
	// A had made already (0: recovery replays them from their checkpoints).
	ReplayedModelCalls int64 `json:"replayedModelCalls"`
}

// WaitingWake is the wake latency of waiting sessions answered one at a
// time, from just before the approval: the call of SubmitToolResult, or
// the request to worker B when it submits the approvals.
type WaitingWake struct {
	Samples int `json:"samples"`
	// Isolated: each sample waited for its session to complete before
	// the next approval (WaitingConfig.WakeIsolated).
	Isolated bool `json:"isolated,omitempty"`
	// SubmitToTool runs to the approved tool's run, SubmitToNextStep to
	// the model's call for step 2, Submit to SubmitToolResult's return
	// (to worker B's answer, through its pipes, when it submits).
	SubmitToTool     Distribution `json:"submitToTool"`
	SubmitToNextStep Distribution `json:"submitToNextStep"`
	Submit           Distribution `json:"submit"`
}

// WaitingDrain is the other sessions answered by concurrent callers.
type WaitingDrain struct {
	Sessions int `json:"sessions"`
	Callers  int `json:"callers"`
	// SubmitWallS runs to the last SubmitToolResult's return,
	// CompleteWallS to every session completed; the rates are Sessions
	// over them.
	SubmitWallS        float64 `json:"submitWallS"`
	ApprovalsPerSecond float64 `json:"approvalsPerSecond"`
	CompleteWallS      float64 `json:"completeWallS"`
	CompletedPerSecond float64 `json:"completedPerSecond"`
}

// WaitingOutcome is what became of the sessions.
type WaitingOutcome struct {
	// Completed counts the sessions completed, Steps their committed
	// steps (2 each).
	Completed int `json:"completed"`
	Steps     int `json:"steps"`
	// WokeOnce counts the sessions whose approved tool ran once and whose
	// model was called once for step 2; ToolRuns and NextStepCalls count
	// all of those.
	WokeOnce      int `json:"wokeOnce"`
	ToolRuns      int `json:"toolRuns"`
	NextStepCalls int `json:"nextStepCalls"`
	// HibernationWakes sums the runs' wakes from hibernation
	// (helix.runs.wakes): one per session when they hibernated, else 0.
	HibernationWakes int `json:"hibernationWakes"`
	// LeftWaiting counts the sessions left waiting for their approval
	// when the sessions were not drained (Drained false).
	LeftWaiting int `json:"leftWaiting,omitempty"`
	// Failures counts the model calls of worker B that did not go as
	// scripted.
	Failures int64 `json:"failures"`
}

// WriteText writes the waiting-sessions report as text.
func (r *WaitingReport) WriteText(w io.Writer) error {
	var b strings.Builder
	m, c, n, h := r.Machine, r.Config, r.Config.Sessions, r.Hibernation
	mode := "live waits, never hibernated"
	if h != nil {
		mode = "hibernated after " + c.HibernateAfter + " of waiting"
	}
	fmt.Fprintf(&b, "helix-dbos waiting sessions: %d sessions waiting for an approval, %s (%.0f s)\n", n, mode, r.DurationS)
	fmt.Fprintf(&b, "machine: %d CPU (%s), %.1f GiB, %s %s/%s\n", m.CPUs, orUnknown(m.CPUModel), m.MemoryGiB, m.GoVersion, m.OS, m.Arch)
	fmt.Fprintf(&b, "postgres: %s, host %s; worker pool of %d\n\n", firstWords(m.Postgres, 2), m.DatabaseHost, m.PoolMaxConns)
	fmt.Fprintf(&b, "%-34s %s\n", "worker A, idle:", footprintText(r.Idle))
	if h == nil || h.LiveCaught {
		fmt.Fprintf(&b, "%-34s %s\n", fmt.Sprintf("worker A, %d waiting live:", n), footprintText(r.Waiting))
		fmt.Fprintf(&b, "%-34s %s, database %.1f kB\n", "per waiting session:", perSessionText(r.PerSession), r.PerSession.DatabaseBytes/1024)
	} else {
		fmt.Fprintf(&b, "%-34s not caught: runs hibernated before all %d waited live (a longer --hibernate-after catches it)\n",
			fmt.Sprintf("worker A, %d waiting live:", n), n)
		fmt.Fprintf(&b, "%-34s database %.1f kB\n", "per waiting session:", r.PerSession.DatabaseBytes/1024)
	}
	if h != nil {
		fmt.Fprintf(&b, "%-34s %s; %d waits held\n", fmt.Sprintf("worker A, %d hibernated:", h.Hibernated), footprintText(h.Footprint), h.LiveWaits)
		fmt.Fprintf(&b, "%-34s %s, database %.1f kB\n", "per hibernated session:", perSessionText(h.PerSession), h.PerSession.DatabaseBytes/1024)
	}
	fmt.Fprintf(&b, "database (helix and dbos tables): %.1f MiB before, %.1f MiB with the sessions waiting", mib(r.Database.BytesBefore), mib(r.Database.BytesWaiting))
	if h != nil {
		fmt.Fprintf(&b, ", %.1f MiB hibernated", mib(r.Database.BytesHibernated))
	}
	if len(r.Database.Relations) > 0 {
		parts := make([]string, len(r.Database.Relations))
		for i, g := range r.Database.Relations {
			parts[i] = fmt.Sprintf("%s %.0f B (%.1f rows)", g.Table, g.Bytes, g.Rows)
		}
		fmt.Fprintf(&b, "\ndatabase per session, by table (heap, indexes, TOAST): %s", strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, "\nstart: %d sessions to their approval wait in %.1f s (%.0f/s, %d at a time)\n", n, r.Start.WallS, r.Start.SessionsPerSecond, c.Starters)
	if h != nil {
		fmt.Fprintf(&b, "hibernation: all %d runs hibernated, their workflows ended, %.1f s after the last one suspended\n", h.Hibernated, h.WallS)
	}
	b.WriteString("\n")
	rs := r.Restart
	if h == nil {
		fmt.Fprintf(&b, "restart (SIGKILL, same executor ID): Launch %.0f ms (idle: %.0f ms); all %d waiting again %.2f s after it returned; settled %.1f s later; step-1 model calls replayed: %d\n",
			rs.LaunchMS, rs.IdleLaunchMS, rs.Recovered, rs.RecoveredS, rs.SettledS, rs.ReplayedModelCalls)
		fmt.Fprintf(&b, "%-34s %s\n", "worker B, recovered:", footprintText(rs.Footprint))
		fmt.Fprintf(&b, "%-34s %s\n\n", "per recovered session:", perSessionText(rs.PerSession))
	} else {
		fmt.Fprintf(&b, "restart (SIGKILL, same executor ID): Launch %.0f ms (idle: %.0f ms); replayed: %d (waits B holds), %d runs still hibernated; settled %.1f s after Launch; step-1 model calls replayed: %d\n",
			rs.LaunchMS, rs.IdleLaunchMS, rs.Replayed, rs.Hibernated, rs.SettledS, rs.ReplayedModelCalls)
		fmt.Fprintf(&b, "%-34s %s\n", "worker B, launched:", footprintText(rs.Footprint))
		fmt.Fprintf(&b, "%-34s %s\n\n", "per hibernated session:", perSessionText(rs.PerSession))
	}
	o := r.Outcome
	if !r.Drained {
		fmt.Fprintf(&b, "wake and drain: skipped (--waiting-drain=false); %d of %d sessions left waiting in the database, unanswered; %d failures\n",
			o.LeftWaiting, n, o.Failures)
		_, err := io.WriteString(w, b.String())
		return err
	}
	via := "an engine.Client in the bench process"
	if c.ApproveVia == ApproveViaEngine {
		via = "worker B's engine (Engine.SubmitToolResult in the process that runs the sessions)"
	}
	fmt.Fprintf(&b, "approvals via %s\n", via)
	wk := r.Wake
	title := fmt.Sprintf("wake, %d sessions approved one at a time (ms):", wk.Samples)
	if h != nil {
		title = fmt.Sprintf("wake from hibernation, %d sessions approved one at a time (ms):", wk.Samples)
	}
	if wk.Isolated {
		title = strings.TrimSuffix(title, " (ms):") + ", each on an idle worker (ms):"
	}
	width := max(44, utf8.RuneCountInString(title)-3) // the rows' name column
	fmt.Fprintf(&b, "%-*s  p50     p99     mean    max\n", width+3, title)
	for _, row := range []struct {
		name string
		d    Distribution
	}{{"approval → tool ran", wk.SubmitToTool}, {"approval → next model call", wk.SubmitToNextStep}, {"SubmitToolResult", wk.Submit}} {
		fmt.Fprintf(&b, "  %-*s %7.2f %7.2f %7.2f %7.2f\n", width, row.name, row.d.P50MS, row.d.P99MS, row.d.MeanMS, row.d.MaxMS)
	}
	d := r.Drain
	fmt.Fprintf(&b, "drain, %d sessions by %d concurrent callers: %.0f approvals/s (%.1f s), %.0f sessions completed/s (%.1f s)\n",
		d.Sessions, d.Callers, d.ApprovalsPerSecond, d.SubmitWallS, d.CompletedPerSecond, d.CompleteWallS)
	fmt.Fprintf(&b, "outcome: %d of %d sessions completed (%d steps); %d woke once (%d tool runs, %d step-2 model calls, %d wakes from hibernation); %d failures\n",
		o.Completed, n, o.Steps, o.WokeOnce, o.ToolRuns, o.NextStepCalls, o.HibernationWakes, o.Failures)
	_, err := io.WriteString(w, b.String())
	return err
}

func footprintText(f WorkerFootprint) string {
	return fmt.Sprintf("RSS %.1f MiB, %d goroutines, heap %.1f MiB, stacks %.1f MiB",
		mib(f.RSSBytes), f.Goroutines, mib(int64(f.HeapInuseBytes)), mib(int64(f.StackInuseBytes)))
}

func perSessionText(p PerWaitingSession) string {
	return fmt.Sprintf("RSS %.1f kB, %.2f goroutines, heap %.1f kB, stacks %.1f kB", p.RSSBytes/1024, p.Goroutines, p.HeapBytes/1024, p.StackBytes/1024)
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
