package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Targets of the engine (issue text). They are evaluated in a Report, never
// asserted by a test: timing depends on the machine.
const (
	TargetP50MS           = 3.0
	TargetP95MS           = 6.0
	TargetLateEarlyRatio  = 1.10
	TargetStepsPerSecond  = 300.0
	TargetSessionsForRate = 32
	// TargetHITLP50MS bounds the median time from a tool result's
	// submission to the next model call of the run it wakes.
	TargetHITLP50MS = 20.0
	// TargetStreamP99MS bounds the 99th percentile of the time from a
	// token delta's write to its reader, with TargetStreams streams.
	TargetStreamP99MS = 50.0
	// TargetStreams is the number of concurrent token streams
	// TargetStreamP99MS is set for.
	TargetStreams = 32
	// TargetStreamInsertsPerDelta bounds the batch INSERTs per token
	// delta: at most one for ten deltas.
	TargetStreamInsertsPerDelta = 0.1
)

// textStatements is how many statements WriteText lists.
const textStatements = 12

// Report is the outcome of Run. Durations are in milliseconds.
type Report struct {
	Machine    Machine      `json:"machine"`
	Config     ReportConfig `json:"config"`
	Floors     Floors       `json:"floors"`
	Sequential Sequential   `json:"sequential"`
	Concurrent Concurrent   `json:"concurrent"`
	HITL       HITL         `json:"hitl"`
	Streaming  Streaming    `json:"streaming"`
	Targets    []Target     `json:"targets"`
	// DurationS is how long Run took.
	DurationS float64 `json:"durationS"`
}

// ReportConfig is the configuration a report was measured with.
type ReportConfig struct {
	Steps           int `json:"steps"`
	Sessions        int `json:"sessions"`
	StepsPerSession int `json:"stepsPerSession"`
	FloorSteps      int `json:"floorSteps"`
	HITLSamples     int `json:"hitlSamples"`
	// StreamSessions and StreamDeltas are 0 when the token-streaming phase
	// did not run.
	StreamSessions int `json:"streamSessions"`
	StreamDeltas   int `json:"streamDeltas"`
	// TxTool is set when the bench tool was transactional (Config.TxTool).
	TxTool bool `json:"txTool,omitempty"`
}

// Floors are the costs the engine builds on, measured on the same pool.
type Floors struct {
	// RoundTrip is one `SELECT 1`: the price of any statement.
	RoundTrip Floor `json:"roundTrip"`
	// Commit is one single-row INSERT in its own transaction.
	Commit Floor `json:"commit"`
	// DBOSStep is one no-op dbos.RunAsStep (time between consecutive step
	// bodies of a workflow).
	DBOSStep Floor `json:"dbosStep"`
	// DBOSAgentStep is the DBOS skeleton of one agent step: a no-op
	// RunAsStep, a no-op step through dbos.Go, a no-op RunAsTransaction.
	DBOSAgentStep Floor `json:"dbosAgentStep"`
}

// Floor is one floor measurement.
type Floor struct {
	Distribution
	SQL SQLProfile `json:"sql"`
	CPU CPUProfile `json:"cpu"`
}

// Sequential is the per-step overhead of one long session.
type Sequential struct {
	Steps    int          `json:"steps"`
	Overhead Distribution `json:"overhead"`
	// Early and Late are the overhead over a window starting at step
	// EarlyFirstStep and over the session's last steps (from
	// LateFirstStep); LateEarlyRatio compares their medians.
	Early          Distribution `json:"early"`
	EarlyFirstStep int          `json:"earlyFirstStep"`
	Late           Distribution `json:"late"`
	LateFirstStep  int          `json:"lateFirstStep"`
	LateEarlyRatio float64      `json:"lateEarlyRatio"`
	// GrowthMSPer1000Steps is the least-squares slope of the overhead over
	// the whole session.
	GrowthMSPer1000Steps float64 `json:"growthMsPer1000Steps"`
	// SQL is the whole session's; EarlySQL and LateSQL the windows'.
	SQL      SQLProfile `json:"sql"`
	EarlySQL SQLProfile `json:"earlySql"`
	LateSQL  SQLProfile `json:"lateSql"`
	CPU      CPUProfile `json:"cpu"`
	// Storage is what the session wrote to the database, per step.
	Storage Storage `json:"storage"`
	// Growth lists the statements whose time per step grew the most from
	// the early window to the late one.
	Growth []StatementGrowth `json:"growth,omitempty"`
	// SamplesMS is every overhead sample in step order (sample i between
	// steps i+1 and i+2), with Config.KeepSamples.
	SamplesMS []float64 `json:"samplesMs,omitempty"`
}

// Storage is what the sequential session wrote to the database, per agent
// step, from just before its Execute to just after its Result. It is
// everything written in that time: background work of the engine during
// the session (a lease renewal, sweeps) is included, and so is, for the WAL
// and the transactions, which the server counts for all its databases, any
// other writer on the server.
type Storage struct {
	// BytesPerStep is the growth of every table of schemas helix and dbos
	// (pg_total_relation_size: heap, TOAST, indexes, free space and
	// visibility maps). Tables grow by whole 8 KiB pages, so over a short
	// session it is coarse.
	BytesPerStep float64 `json:"bytesPerStep"`
	// WALBytesPerStep is the write-ahead log written (the difference of
	// pg_current_wal_insert_lsn): what a replica or an archive receives.
	WALBytesPerStep float64 `json:"walBytesPerStep"`
	// WriteXactsPerStep counts the transactions that wrote (were given a
	// transaction ID): each is a commit to flush, and an ID toward
	// wraparound.
	WriteXactsPerStep float64 `json:"writeXactsPerStep"`
	// MessageBytesPerStep is the stored size of the session's messages in
	// helix.messages (pg_column_size): the content the
	// database must keep, beside which BytesPerStep is the price of keeping
	// it.
	MessageBytesPerStep float64 `json:"messageBytesPerStep"`
}

// StatementGrowth is one statement's time per step early and late in the
// sequential session.
type StatementGrowth struct {
	SQL            string  `json:"sql"`
	EarlyMSPerStep float64 `json:"earlyMsPerStep"`
	LateMSPerStep  float64 `json:"lateMsPerStep"`
}

// Concurrent is the throughput of sessions running together.
type Concurrent struct {
	Sessions        int `json:"sessions"`
	StepsPerSession int `json:"stepsPerSession"`
	Steps           int `json:"steps"`
	// WallS runs from before the first Execute to the last Result.
	WallS          float64 `json:"wallS"`
	StepsPerSecond float64 `json:"stepsPerSecond"`
	// Overhead is the per-step overhead of every session, under load.
	Overhead Distribution `json:"overhead"`
	SQL      SQLProfile   `json:"sql"`
	CPU      CPUProfile   `json:"cpu"`
}

// HITL is the latency of human-in-the-loop answers: sessions run one after
// the other, each suspends on a client-executed tool at step 1 and blocks in
// DBOS Recv; the bench then submits the tool's result, which wakes the run
// (Postgres NOTIFY) to commit step 1 and call the model for step 2.
type HITL struct {
	Sessions int `json:"sessions"`
	// SubmitToNextStep runs from just before SubmitToolResult to the model
	// being entered for the next step: the submission's transaction, the
	// wake-up, the Recv, the call's resolution, the step's commit and the
	// next model step's bookkeeping. The wait for the run to suspend is not
	// part of it.
	SubmitToNextStep Distribution `json:"submitToNextStep"`
	// Submit is SubmitToolResult itself: validation, the submission's
	// record and its DBOS message, in one transaction.
	Submit Distribution `json:"submit"`
	// Resume runs from SubmitToolResult's return to the model being
	// entered for the next step.
	Resume Distribution `json:"resume"`
	// SQL is what ran on the pool inside the samples, per sample: the
	// submission's statements and the woken run's.
	SQL SQLProfile `json:"sql"`
	// CPU is per session, over the whole phase (each session's start,
	// suspension and completion included, not only its sample): its
	// "other" part tells whether the machine was quiet.
	CPU CPUProfile `json:"cpu"`
	// SamplesMS is every SubmitToNextStep sample in session order, with
	// Config.KeepSamples.
	SamplesMS []float64 `json:"samplesMs,omitempty"`
}

// Streaming is the latency of token streaming with many streams at once:
// Streams sessions, each with a reader attached before the first write and
// a writer that writes a text delta every IntervalMS, the writers
// phase-shifted so they do not tick together. The store batches the deltas
// of every stream into shared INSERTs and wakes the readers with NOTIFY.
type Streaming struct {
	Streams         int `json:"streams"`
	DeltasPerStream int `json:"deltasPerStream"`
	// Deltas is every stream's deltas together, one latency sample each.
	Deltas     int     `json:"deltas"`
	IntervalMS float64 `json:"intervalMs"`
	// WallS runs from the writers' start to the last delta read.
	WallS float64 `json:"wallS"`
	// ChunkToReader runs from a delta's Write (the wall-clock time the
	// delta carries) to its reader's Next returning it: the wait for its
	// batch, the batch INSERT, the NOTIFY and the reader's fetch.
	ChunkToReader Distribution `json:"chunkToReader"`
	// Inserts counts the batch INSERTs the store committed during the
	// phase; InsertsPerDelta divides them by the deltas they wrote.
	Inserts         int64   `json:"inserts"`
	InsertsPerDelta float64 `json:"insertsPerDelta"`
	// SQL is what ran on the pool, per delta: the batch INSERTs and the
	// readers' fetches.
	SQL SQLProfile `json:"sql"`
	// CPU is per delta, over the phase.
	CPU CPUProfile `json:"cpu"`
}

// Target is one engine target and how the report fares against it.
type Target struct {
	Name string `json:"name"`
	// Comparison is "<=" or ">=": Measured Comparison Limit meets it.
	Comparison string  `json:"comparison"`
	Limit      float64 `json:"limit"`
	Measured   float64 `json:"measured"`
	Unit       string  `json:"unit"`
	Met        bool    `json:"met"`
}

func (r *Report) evaluate() {
	atMost := func(name string, limit, measured float64, unit string) Target {
		return Target{Name: name, Comparison: "<=", Limit: limit, Measured: measured, Unit: unit, Met: measured <= limit}
	}
	atLeast := func(name string, limit, measured float64, unit string) Target {
		return Target{Name: name, Comparison: ">=", Limit: limit, Measured: measured, Unit: unit, Met: measured >= limit}
	}
	s, c := r.Sequential, r.Concurrent
	r.Targets = []Target{
		atMost("sequential overhead per step, p50", TargetP50MS, s.Overhead.P50MS, "ms"),
		atMost("sequential overhead per step, p95", TargetP95MS, s.Overhead.P95MS, "ms"),
		atMost(fmt.Sprintf("overhead at steps %d+ vs %d+ (p50 ratio)", s.LateFirstStep, s.EarlyFirstStep), TargetLateEarlyRatio, s.LateEarlyRatio, "×"),
		atLeast(fmt.Sprintf("aggregate steps/s, %d concurrent sessions", c.Sessions), TargetStepsPerSecond, c.StepsPerSecond, "steps/s"),
	}
	if hl := r.HITL; hl.SubmitToNextStep.Count > 0 {
		r.Targets = append(r.Targets, atMost("human in the loop: submission → next model call, p50", TargetHITLP50MS, hl.SubmitToNextStep.P50MS, "ms"))
	}
	if st := r.Streaming; st.ChunkToReader.Count > 0 {
		r.Targets = append(r.Targets,
			atMost(fmt.Sprintf("token streaming: chunk to reader p99, %d streams", st.Streams), TargetStreamP99MS, st.ChunkToReader.P99MS, "ms"),
			atMost("token streaming: inserts per delta", TargetStreamInsertsPerDelta, st.InsertsPerDelta, "inserts/delta"))
	}
}

// WriteText writes the report as tables for people.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "helix-dbos engine benchmark (%.0f s)\n", r.DurationS)
	fmt.Fprintf(&b, "machine: %d CPU (%s), %.1f GiB, %s %s/%s\n", m.CPUs, orUnknown(m.CPUModel), m.MemoryGiB, m.GoVersion, m.OS, m.Arch)
	fmt.Fprintf(&b, "postgres: %s\n", firstWords(m.Postgres, 2))
	fmt.Fprintf(&b, "          host %s, pool of %d, fsync=%s synchronous_commit=%s wal_sync_method=%s shared_buffers=%s\n\n",
		m.DatabaseHost, m.PoolMaxConns, m.Settings["fsync"], m.Settings["synchronous_commit"], m.Settings["wal_sync_method"], m.Settings["shared_buffers"])
	if r.Config.TxTool {
		fmt.Fprintf(&b, "the bench tool is transactional (--tx-tool): each call writes a row of %s in its transaction\n\n", TxEffectsTable)
	}

	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "per step (ms)\tsamples\tp50\tp95\tp99\tmean\tmax\tstatements\tround trips\tin SQL\tclient CPU\tPostgres CPU\tother CPU\thost CPU\t")
	row := func(name string, d Distribution, sql SQLProfile, cpu CPUProfile) {
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.1f\t%.1f\t%.3f\t%s\t%s\t%s\t%s\t\n", name, d.Count, d.P50MS, d.P95MS, d.P99MS, d.MeanMS, d.MaxMS,
			sql.StatementsPerStep, sql.RoundTripsPerStep, sql.StatementMSPerStep, clientCPU(cpu), postgresCPU(cpu), otherCPU(cpu), hostCPU(cpu))
	}
	f := r.Floors
	row("floor: round trip (SELECT 1)", f.RoundTrip.Distribution, f.RoundTrip.SQL, f.RoundTrip.CPU)
	row("floor: single-row commit", f.Commit.Distribution, f.Commit.SQL, f.Commit.CPU)
	row("floor: DBOS no-op step", f.DBOSStep.Distribution, f.DBOSStep.SQL, f.DBOSStep.CPU)
	row("floor: DBOS agent-step skeleton", f.DBOSAgentStep.Distribution, f.DBOSAgentStep.SQL, f.DBOSAgentStep.CPU)
	s := r.Sequential
	row(fmt.Sprintf("engine: sequential, %d steps", s.Steps), s.Overhead, s.SQL, s.CPU)
	row(fmt.Sprintf("  steps %d–%d", s.EarlyFirstStep, s.EarlyFirstStep+s.Early.Count-1), s.Early, s.EarlySQL, CPUProfile{})
	row(fmt.Sprintf("  steps %d–%d", s.LateFirstStep, s.LateFirstStep+s.Late.Count-1), s.Late, s.LateSQL, CPUProfile{})
	c := r.Concurrent
	row(fmt.Sprintf("engine: %d sessions × %d steps", c.Sessions, c.StepsPerSession), c.Overhead, c.SQL, c.CPU)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(&b, "\nsequential p50 = %.1f× the DBOS agent-step skeleton, %.1f× a single-row commit; growth %.3f ms per 1000 steps\n",
		ratio(s.Overhead.P50MS, f.DBOSAgentStep.P50MS), ratio(s.Overhead.P50MS, f.Commit.P50MS), s.GrowthMSPer1000Steps)
	st := s.Storage
	fmt.Fprintf(&b, "sequential storage per step: %.0f B in the helix and dbos tables, %.0f B of WAL, %.2f write transactions; messages %.0f B\n",
		st.BytesPerStep, st.WALBytesPerStep, st.WriteXactsPerStep, st.MessageBytesPerStep)
	fmt.Fprintf(&b, "concurrent: %d steps in %.2f s = %.0f steps/s (pool wait %.3f ms per step)\n\n",
		c.Steps, c.WallS, c.StepsPerSecond, c.SQL.AcquireWaitMSPerStep)
	if hl := r.HITL; hl.SubmitToNextStep.Count > 0 {
		tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "human in the loop (ms)\tsamples\tp50\tp95\tp99\tmean\tmax\t")
		hrow := func(name string, d Distribution) {
			fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t\n", name, d.Count, d.P50MS, d.P95MS, d.P99MS, d.MeanMS, d.MaxMS)
		}
		hrow("submission → next model call", hl.SubmitToNextStep)
		hrow("  SubmitToolResult", hl.Submit)
		hrow("  its return → next model call", hl.Resume)
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(&b, "human in the loop: %.1f statements in %.1f round trips (%.3f ms in SQL) per answer, submission and woken run\n",
			hl.SQL.StatementsPerStep, hl.SQL.RoundTripsPerStep, hl.SQL.StatementMSPerStep)
		fmt.Fprintf(&b, "                   per session (whole phase): client CPU %s, Postgres CPU %s, other CPU %s, host CPU %s\n\n",
			clientCPU(hl.CPU), postgresCPU(hl.CPU), otherCPU(hl.CPU), hostCPU(hl.CPU))
	}
	if sm := r.Streaming; sm.ChunkToReader.Count > 0 {
		tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "token streaming (ms)\tsamples\tp50\tp95\tp99\tmean\tmax\t")
		d := sm.ChunkToReader
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t\n", fmt.Sprintf("chunk → reader, %d streams × %d deltas, one per %g ms", sm.Streams, sm.DeltasPerStream, sm.IntervalMS),
			d.Count, d.P50MS, d.P95MS, d.P99MS, d.MeanMS, d.MaxMS)
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(&b, "token streaming: %d deltas in %.2f s, %d batch inserts = %.3f inserts per delta; per delta %.2f statements in %.2f round trips (%.3f ms in SQL, pool wait %.3f ms)\n",
			sm.Deltas, sm.WallS, sm.Inserts, sm.InsertsPerDelta, sm.SQL.StatementsPerStep, sm.SQL.RoundTripsPerStep, sm.SQL.StatementMSPerStep, sm.SQL.AcquireWaitMSPerStep)
		fmt.Fprintf(&b, "                 per delta: client CPU %s, Postgres CPU %s, other CPU %s, host CPU %s\n\n",
			clientCPU(sm.CPU), postgresCPU(sm.CPU), otherCPU(sm.CPU), hostCPU(sm.CPU))
	}

	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tlimit\tmeasured\t")
	for _, t := range r.Targets {
		verdict := "met"
		if !t.Met {
			verdict = "MISSED"
		}
		fmt.Fprintf(tw, "%s\t%s %g %s\t%g %s\t%s\n", t.Name, t.Comparison, t.Limit, t.Unit, t.Measured, t.Unit, verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(&b, "\nsequential session, statements per agent step (by time):\n")
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "per step\tms/step\tmean ms\tstatement")
	for _, p := range s.SQL.Top[:min(textStatements, len(s.SQL.Top))] {
		fmt.Fprintf(tw, "%.2f\t%.3f\t%.3f\t%s\n", p.PerStep, p.MSPerStep, p.MeanMS, p.SQL)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(s.Growth) > 0 {
		fmt.Fprintf(&b, "\nstatements whose time per step grew most from steps %d+ to %d+ (ms/step):\n", s.EarlyFirstStep, s.LateFirstStep)
		tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "early\tlate\tstatement")
		for _, g := range s.Growth {
			fmt.Fprintf(tw, "%.3f\t%.3f\t%s\n", g.EarlyMSPerStep, g.LateMSPerStep, g.SQL)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if hl := r.HITL; len(hl.SQL.Top) > 0 {
		fmt.Fprintf(&b, "\nhuman in the loop, statements per answer from submission to next model call (by time):\n")
		tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "per answer\tms/answer\tmean ms\tstatement")
		for _, p := range hl.SQL.Top[:min(textStatements, len(hl.SQL.Top))] {
			fmt.Fprintf(tw, "%.2f\t%.3f\t%.3f\t%s\n", p.PerStep, p.MSPerStep, p.MeanMS, p.SQL)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func clientCPU(c CPUProfile) string {
	if c.ClientMSPerStep == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", c.ClientMSPerStep)
}

func hostCPU(c CPUProfile) string {
	if c.HostMSPerStep == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f (%.0f%%)", c.HostMSPerStep, c.HostUtilization*100)
}

func postgresCPU(c CPUProfile) string {
	if c.PostgresMSPerStep == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", c.PostgresMSPerStep)
}

func otherCPU(c CPUProfile) string {
	if c.PostgresMSPerStep == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", c.OtherMSPerStep)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func orUnknown(s string) string {
	if s == "" {
		return "model unknown"
	}
	return s
}

// firstWords returns the first n words of s ("PostgreSQL 15.18").
func firstWords(s string, n int) string {
	f := strings.Fields(s)
	return strings.Join(f[:min(n, len(f))], " ")
}
