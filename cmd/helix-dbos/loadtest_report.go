package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/helix-agents/helix-dbos/bench"
	"github.com/helix-agents/helix-dbos/engine"
)

// loadtestReport is the report of `loadtest` (--json prints it).
type loadtestReport struct {
	Config      loadtestSettings   `json:"config"`
	Tenants     []loadtestTenant   `json:"tenants"`
	Overall     loadtestTenant     `json:"overall"`
	Throughput  loadtestThroughput `json:"throughput"`
	RateLimit   loadtestRateLimit  `json:"rateLimit"`
	Replicas    []loadtestReplica  `json:"replicas"`
	StartErrors loadtestErrors     `json:"startErrors"`
	// Unfinished counts the accepted sessions that had not completed or
	// failed at the end (--timeout).
	Unfinished int `json:"unfinished"`
}

// loadtestSettings echo the configuration.
type loadtestSettings struct {
	Mode                       string `json:"mode"` // queued or direct
	Queue                      string `json:"queue,omitempty"`
	Sessions                   int    `json:"sessions"`
	Duration                   string `json:"duration"`
	Replicas                   int    `json:"replicas"`
	Tenants                    string `json:"tenants"`
	QueueConcurrency           int    `json:"queueConcurrency,omitempty"`
	PartitionWorkerConcurrency int    `json:"partitionWorkerConcurrency,omitempty"`
	QueuePollingInterval       string `json:"queuePollingInterval,omitempty"`
	ModelLatency               string `json:"modelLatency"`
	RateLimit                  string `json:"rateLimit,omitempty"`
	QueueRateLimit             string `json:"queueRateLimit,omitempty"`
	Timeout                    string `json:"timeout"`
	Workers                    int    `json:"workers"`
	// SendSpanMS is the time from the first to the last /start sent.
	SendSpanMS float64 `json:"sendSpanMs"`
}

// loadtestTenant are the results of one tenant, or of all (Name "all").
type loadtestTenant struct {
	Name      string `json:"name"`
	Sessions  int    `json:"sessions"` // starts planned
	Accepted  int    `json:"accepted"` // starts answered 202
	Completed int    `json:"completed"`
	Failed    int    `json:"failed"`
	// FailureCodes counts the failed sessions by their last run's error
	// code ("unknown" without one).
	FailureCodes map[string]int `json:"failureCodes,omitempty"`
	// StartDelay is the provider's first call for a session minus its
	// /start send time (this process's clock).
	StartDelay bench.Distribution `json:"startDelay"`
	// EndToEnd is a completed session's updated_at minus created_at (the
	// database's clock).
	EndToEnd bench.Distribution `json:"endToEnd"`
}

// loadtestThroughput is the rate of completions and model calls.
type loadtestThroughput struct {
	// WindowMS runs from the first session's creation to the last
	// completion (the database's clock).
	WindowMS            float64 `json:"windowMs"`
	SessionsPerSecond   float64 `json:"sessionsPerSecond"`
	ModelCalls          int     `json:"modelCalls"`
	ModelCallsPerSecond float64 `json:"modelCallsPerSecond"`
}

// loadtestRateLimit is what the provider saw of the rate limit.
type loadtestRateLimit struct {
	// Limit is --rate-limit ("" for none).
	Limit string `json:"limit,omitempty"`
	// PeriodMS is the window of MaxCallsInWindow: the limit's period, 1s
	// without a limit.
	PeriodMS float64 `json:"periodMs"`
	// MaxCallsInWindow is the most calls (429s included) the provider
	// received in any window of PeriodMS.
	MaxCallsInWindow int `json:"maxCallsInWindow"`
	// Violations are the calls answered 429.
	Violations int `json:"violations"`
}

// loadtestReplica is one replica's process.
type loadtestReplica struct {
	PID       int     `json:"pid"`
	Addr      string  `json:"addr"`
	PeakRSSMB float64 `json:"peakRssMb"`
	EndRSSMB  float64 `json:"endRssMb"`
	Memory    string  `json:"memoryError,omitempty"`
	Exit      string  `json:"exit"`
}

// loadtestErrors are the /start requests not answered 202.
type loadtestErrors struct {
	Count   int      `json:"count"`
	Samples []string `json:"samples,omitempty"`
}

// buildReport measures the run.
func buildReport(p *loadPlan, starts []startResult, calls []providerCall, rows map[string]sessionRow,
	reps []*replica, mem []replicaMemory, exits []string) *loadtestReport {
	rep := &loadtestReport{Config: settingsOf(p, starts)}
	first := firstCalls(calls)
	perTenant := make([]tenantSamples, len(p.tenants))
	var all tenantSamples
	for i, s := range p.sessions {
		perTenant[s.tenant].add(s, starts[i], first, rows)
		all.add(s, starts[i], first, rows)
		if starts[i].status != http.StatusAccepted {
			rep.StartErrors.Count++
			if len(rep.StartErrors.Samples) < loadtestErrorSamples {
				rep.StartErrors.Samples = append(rep.StartErrors.Samples, cmp.Or(starts[i].detail, s.id+": not sent before the end (--timeout or interrupt)"))
			}
		}
	}
	for i, t := range p.tenants {
		rep.Tenants = append(rep.Tenants, perTenant[i].report(t.name))
	}
	rep.Overall = all.report("all")
	rep.Unfinished = all.accepted - all.completed - all.failed
	rep.Throughput = throughputOf(rows, len(calls))
	rep.RateLimit = rateLimitOf(p, calls)
	for i, rp := range reps {
		rep.Replicas = append(rep.Replicas, replicaReport(rp, mem[i], exits[i]))
	}
	return rep
}

// settingsOf echoes the plan.
func settingsOf(p *loadPlan, starts []startResult) loadtestSettings {
	f := p.flags
	s := loadtestSettings{Mode: "direct", Sessions: f.sessions, Duration: f.duration.String(), Replicas: f.replicas, Tenants: p.tenantSpecs,
		ModelLatency: f.modelLatency.String(), RateLimit: f.rateLimit, Timeout: f.timeout.String(), Workers: loadtestWorkers}
	if p.queued {
		s.Mode, s.Queue, s.QueueConcurrency, s.PartitionWorkerConcurrency = "queued", f.queue, f.queueConcurrency, f.partitionWorkerConcurrency
		s.QueueRateLimit = p.queueRateLimit()
		s.QueuePollingInterval = engine.DefaultQueuePollingInterval.String() + " (serve's default)"
		if f.pollingInterval > 0 {
			s.QueuePollingInterval = f.pollingInterval.String()
		}
	}
	var lo, hi time.Time
	for _, r := range starts {
		if r.sent.IsZero() {
			continue
		}
		if lo.IsZero() || r.sent.Before(lo) {
			lo = r.sent
		}
		if r.sent.After(hi) {
			hi = r.sent
		}
	}
	s.SendSpanMS = durationMS(hi.Sub(lo))
	return s
}

// firstCalls maps each session to the time the provider first heard of
// it.
func firstCalls(calls []providerCall) map[string]time.Time {
	out := map[string]time.Time{}
	for _, c := range calls {
		if t, ok := out[c.session]; !ok || c.at.Before(t) {
			out[c.session] = c.at
		}
	}
	return out
}

// tenantSamples accumulates a tenant's results.
type tenantSamples struct {
	sessions, accepted, completed, failed int
	startDelays, endToEnd                 []time.Duration
	failureCodes                          map[string]int
}

// add accounts for one planned session.
func (t *tenantSamples) add(s plannedStart, res startResult, first map[string]time.Time, rows map[string]sessionRow) {
	t.sessions++
	if res.status != http.StatusAccepted {
		return
	}
	t.accepted++
	if at, ok := first[s.id]; ok {
		t.startDelays = append(t.startDelays, at.Sub(res.sent))
	}
	switch row := rows[s.id]; row.status {
	case "completed":
		t.completed++
		t.endToEnd = append(t.endToEnd, row.updatedAt.Sub(row.created))
	case "failed":
		t.failed++
		if t.failureCodes == nil {
			t.failureCodes = map[string]int{}
		}
		t.failureCodes[cmp.Or(row.errorCode, "unknown")]++
	}
}

// report summarizes the samples.
func (t *tenantSamples) report(name string) loadtestTenant {
	return loadtestTenant{Name: name, Sessions: t.sessions, Accepted: t.accepted, Completed: t.completed, Failed: t.failed,
		FailureCodes: t.failureCodes, StartDelay: summarize(t.startDelays), EndToEnd: summarize(t.endToEnd)}
}

// throughputOf measures completions per second from the first session's
// creation to the last completion, and model calls per second over the
// same window.
func throughputOf(rows map[string]sessionRow, calls int) loadtestThroughput {
	var lo, hi time.Time
	completed := 0
	for _, r := range rows {
		if lo.IsZero() || r.created.Before(lo) {
			lo = r.created
		}
		if r.status == "completed" {
			completed++
			if r.updatedAt.After(hi) {
				hi = r.updatedAt
			}
		}
	}
	out := loadtestThroughput{ModelCalls: calls}
	if completed == 0 || !hi.After(lo) {
		return out
	}
	window := hi.Sub(lo)
	out.WindowMS = durationMS(window)
	out.SessionsPerSecond = round2(float64(completed) / window.Seconds())
	out.ModelCallsPerSecond = round2(float64(calls) / window.Seconds())
	return out
}

// rateLimitOf counts the 429s and the most calls in any period window.
func rateLimitOf(p *loadPlan, calls []providerCall) loadtestRateLimit {
	period := cmp.Or(p.period, time.Second)
	out := loadtestRateLimit{Limit: p.flags.rateLimit, PeriodMS: durationMS(period)}
	times := make([]time.Time, len(calls))
	for i, c := range calls {
		times[i] = c.at
		if c.rejected {
			out.Violations++
		}
	}
	out.MaxCallsInWindow = maxInWindow(times, period)
	return out
}

// maxInWindow returns the most times in any half-open window [t, t+period).
func maxInWindow(times []time.Time, period time.Duration) int {
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	best, lo := 0, 0
	for hi, t := range times {
		for t.Sub(times[lo]) >= period {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// replicaReport describes one replica.
func replicaReport(rp *replica, m replicaMemory, exit string) loadtestReplica {
	out := loadtestReplica{PID: rp.cmd.Process.Pid, Addr: rp.addr, PeakRSSMB: kbToMB(m.peakKB), EndRSSMB: kbToMB(m.currentKB), Exit: exit}
	if m.err != nil {
		out.Memory = m.err.Error()
	}
	return out
}

// summarize returns the nearest-rank distribution of ds (it sorts ds).
func summarize(ds []time.Duration) bench.Distribution {
	if len(ds) == 0 {
		return bench.Distribution{}
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return bench.Distribution{Count: len(ds), MeanMS: durationMS(sum / time.Duration(len(ds))),
		P50MS: durationMS(nearestRank(ds, 0.50)), P95MS: durationMS(nearestRank(ds, 0.95)),
		P99MS: durationMS(nearestRank(ds, 0.99)), MaxMS: durationMS(ds[len(ds)-1])}
}

// nearestRank returns the nearest-rank p-quantile of sorted (not empty).
func nearestRank(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// durationMS converts d to milliseconds, rounded to the microsecond.
func durationMS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// kbToMB converts kibibytes to mebibytes, rounded to a tenth.
func kbToMB(kb int64) float64 { return math.Round(float64(kb)/1024*10) / 10 }

// round2 rounds to two decimals.
func round2(v float64) float64 { return math.Round(v*100) / 100 }

// writeText prints the report as a table and a few lines.
func (r *loadtestReport) writeText(out io.Writer) error {
	c := r.Config
	mode := "direct (--queue off): each session runs at once on the replica that receives it"
	if c.Mode == "queued" {
		mode = fmt.Sprintf("queued through %s: %d per replica, %s per tenant per replica, rate limit %s, polling every %s", c.Queue,
			c.QueueConcurrency, map[bool]string{true: "no separate cap", false: strconv.Itoa(c.PartitionWorkerConcurrency)}[c.PartitionWorkerConcurrency == 0],
			cmp.Or(c.QueueRateLimit, "none"), c.QueuePollingInterval)
	}
	fmt.Fprintf(out, "helix-dbos loadtest: %d sessions over %s (sent over %.0f ms), replicas: %d, tenants %s, model latency %s\n",
		c.Sessions, c.Duration, c.SendSpanMS, c.Replicas, c.Tenants, c.ModelLatency)
	fmt.Fprintf(out, "mode: %s\n\n", mode)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TENANT\tSESSIONS\tCOMPLETED\tFAILED\tSTART ms: p50\tp95\tp99\tmax\tEND-TO-END ms: p50\tp95\tp99")
	for _, t := range append(slices.Clone(r.Tenants), r.Overall) {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.Sessions, t.Completed, t.Failed,
			msText(t.StartDelay, t.StartDelay.P50MS), msText(t.StartDelay, t.StartDelay.P95MS), msText(t.StartDelay, t.StartDelay.P99MS),
			msText(t.StartDelay, t.StartDelay.MaxMS), msText(t.EndToEnd, t.EndToEnd.P50MS), msText(t.EndToEnd, t.EndToEnd.P95MS),
			msText(t.EndToEnd, t.EndToEnd.P99MS))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "(start: the provider's first call minus the /start send; end-to-end: updated_at - created_at of completed sessions)")
	fmt.Fprintln(out)
	r.writeSummary(out)
	return nil
}

// writeSummary prints the throughput, rate limit, replica and error lines.
func (r *loadtestReport) writeSummary(out io.Writer) {
	t, rl := r.Throughput, r.RateLimit
	fmt.Fprintf(out, "throughput:   %.1f sessions/s completed over %.2fs (first session created to last completed, database clock); "+
		"%.1f model calls/s (%d calls)\n", t.SessionsPerSecond, t.WindowMS/1000, t.ModelCallsPerSecond, t.ModelCalls)
	period := (time.Duration(rl.PeriodMS * float64(time.Millisecond))).String()
	fmt.Fprintf(out, "rate limit:   %s; at most %d model calls in any %s window; %d violations (429)\n",
		cmp.Or(rl.Limit, "none"), rl.MaxCallsInWindow, period, rl.Violations)
	for i, rp := range r.Replicas {
		mem := fmt.Sprintf("peak RSS %.1f MB, RSS at end %.1f MB", rp.PeakRSSMB, rp.EndRSSMB)
		if rp.Memory != "" {
			mem = rp.Memory
		}
		fmt.Fprintf(out, "replica %d:    pid %d on %s: %s; %s\n", i+1, rp.PID, rp.Addr, mem, rp.Exit)
	}
	if codes := r.Overall.FailureCodes; len(codes) > 0 {
		var parts []string
		for _, code := range slices.Sorted(maps.Keys(codes)) {
			parts = append(parts, fmt.Sprintf("%s %d", code, codes[code]))
		}
		fmt.Fprintf(out, "failed:       %d sessions (by error code: %s)\n", r.Overall.Failed, strings.Join(parts, ", "))
	}
	fmt.Fprintf(out, "/start errors: %d\n", r.StartErrors.Count)
	for _, s := range r.StartErrors.Samples {
		fmt.Fprintf(out, "  %s\n", s)
	}
	if r.Unfinished > 0 {
		fmt.Fprintf(out, "unfinished:   %d sessions had not completed or failed at the end\n", r.Unfinished)
	}
}

// msText formats a value of d, in milliseconds, for the table ("-" when d
// has no sample).
func msText(d bench.Distribution, v float64) string {
	if d.Count == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}
