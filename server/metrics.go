package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/helix-agents/helix-dbos/store"
)

// metrics are the server's collectors (the package documentation lists
// them).
type metrics struct {
	requests       *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	sseConnections prometheus.Gauge
	sseChunks      prometheus.Counter
	streamLag      prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, stats func(context.Context) (*store.DatabaseStats, error), maxAge time.Duration, log zerolog.Logger) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "helix_http_requests_total",
			Help: "HTTP requests answered, by route, method and status code.",
		}, []string{"route", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "helix_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route and method (streaming routes excluded).",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "method"}),
		sseConnections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "helix_sse_connections",
			Help: "Open GET /sse responses.",
		}),
		sseChunks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "helix_sse_chunks_sent_total",
			Help: "Stream chunks sent over GET /sse.",
		}),
		streamLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "helix_stream_lag_seconds",
			Help:    "Time from a chunk's timestamp to its sending over GET /sse, for chunks written while the client was connected.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
	}
	db := &dbCollector{maxAge: maxAge, log: log, now: time.Now}
	db.load = func(ctx context.Context) ([]prometheus.Metric, error) {
		st, err := stats(ctx)
		if err != nil {
			return nil, err
		}
		return metricsOf(st), nil
	}
	collectors := []prometheus.Collector{m.requests, m.latency, m.sseConnections, m.sseChunks, m.streamLag, db}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			if _, dup := errors.AsType[prometheus.AlreadyRegisteredError](err); dup {
				return nil, fmt.Errorf("server: Config.Metrics already has the server's metrics (another Server?): give each Server its own registry or wrap it with prometheus.WrapRegistererWith: %w", err)
			}
			return nil, fmt.Errorf("server: register metrics: %w", err)
		}
	}
	return m, nil
}

// observeRequest records an answered request.
func (m *metrics) observeRequest(route, method string, status int, d time.Duration, streaming bool) {
	switch method { // clients choose the method: bound the label's values
	case http.MethodGet, http.MethodPost, http.MethodHead, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
	default:
		method = "other"
	}
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	if !streaming {
		m.latency.WithLabelValues(route, method).Observe(d.Seconds())
	}
}

// observeChunk records a chunk sent over SSE; its lag only when it was
// written after the client connected (a replayed backlog is not lag).
func (m *metrics) observeChunk(c store.StoredChunk, connected time.Time) {
	m.sseChunks.Inc()
	at := c.CreatedAt
	if b := c.Chunk.ChunkBase(); b != nil && b.Timestamp > 0 {
		at = time.UnixMilli(b.Timestamp)
	}
	if !at.IsZero() && !at.Before(connected) {
		m.streamLag.Observe(time.Since(at).Seconds())
	}
}

// dbCollector reports what the database holds: the counts every engine
// process contributes to, so any server instance reports the cluster's
// totals. /metrics is not authenticated and the counts scan whole tables,
// so the figures are read at most once per maxAge, by one query however
// many scrapes arrive meanwhile (the others wait for it and share its
// figures); a failed query is remembered as long, so that a struggling
// database is not asked again by every scrape.
type dbCollector struct {
	load   func(ctx context.Context) ([]prometheus.Metric, error)
	maxAge time.Duration
	log    zerolog.Logger
	now    func() time.Time

	mu       sync.Mutex
	figures  []prometheus.Metric // of the last query
	err      error               // of the last query
	readAt   time.Time           // of the last query; zero before the first
	inflight chan struct{}       // closed when the running query is done; nil when none runs
}

var (
	descUp = prometheus.NewDesc("helix_database_up",
		"1 when the last scrape's database queries succeeded, else 0 (and the helix_* database metrics are missing).", nil, nil)
	descRuns = prometheus.NewDesc("helix_runs",
		"Runs recorded in the database, by status (running, completed, failed, interrupted, suspended_*).", []string{"status"}, nil)
	descSessions = prometheus.NewDesc("helix_sessions",
		"Sessions recorded in the database, by status.", []string{"status"}, nil)
	descSteps = prometheus.NewDesc("helix_steps_committed_total",
		"Agent steps committed (one checkpoint per committed step).", nil, nil)
	descModelCalls = prometheus.NewDesc("helix_model_calls_total",
		"Model calls recorded (usage rows), by success.", []string{"success"}, nil)
	descToolCalls = prometheus.NewDesc("helix_tool_calls_total",
		"Tool calls executed (usage rows), by type (tool or subagent) and success.", []string{"type", "success"}, nil)
	descSubmissions = prometheus.NewDesc("helix_tool_submissions_total",
		"Suspended tool calls answered by a submission (client results and approval decisions).", nil, nil)
	descWait = prometheus.NewDesc("helix_tool_submission_wait_seconds_total",
		"Total time suspended tool calls waited for their submission.", nil, nil)
	descPending = prometheus.NewDesc("helix_pending_tool_calls",
		"Tool calls waiting for a submission now (suspensions), by kind (client-tool-result or approval-response).", []string{"kind"}, nil)
	descQueueDepth = prometheus.NewDesc("helix_queue_depth",
		"Workflows waiting in a DBOS queue for a slot, by queue (a queued run's segments on the server's queue; _dbos_internal_queue holds recovered workflows).", []string{"queue"}, nil)
	descQueueRunning = prometheus.NewDesc("helix_queue_running",
		"Workflows taken from a DBOS queue and running (holding a slot), by queue.", []string{"queue"}, nil)
	descQueueOldest = prometheus.NewDesc("helix_queue_oldest_wait_seconds",
		"How long the oldest workflow waiting in a DBOS queue has waited, by queue (0 when none waits).", []string{"queue"}, nil)
	descQueueStarted = prometheus.NewDesc("helix_queue_started_last_minute",
		"Workflows a DBOS queue started in the last minute, by queue.", []string{"queue"}, nil)
	descQueueWait = prometheus.NewDesc("helix_queue_wait_seconds_last_minute",
		"Mean time the workflows a DBOS queue started in the last minute waited for their slot, by queue.", []string{"queue"}, nil)
)

// Describe implements prometheus.Collector.
func (c *dbCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descRuns, descSessions, descSteps, descModelCalls, descToolCalls,
		descSubmissions, descWait, descPending, descQueueDepth, descQueueRunning, descQueueOldest, descQueueStarted, descQueueWait} {
		ch <- d
	}
}

// Collect implements prometheus.Collector with the figures of snapshot.
func (c *dbCollector) Collect(ch chan<- prometheus.Metric) {
	ms, err := c.snapshot()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 1)
	for _, m := range ms {
		ch <- m
	}
}

// snapshot returns the figures of the last query when it is younger than
// maxAge; otherwise it runs the query (one round trip of five aggregate
// queries, bounded by MetricsQueryTimeout), or waits for the one another
// scrape is running.
func (c *dbCollector) snapshot() (ms []prometheus.Metric, err error) {
	c.mu.Lock()
	for {
		if !c.readAt.IsZero() && c.now().Sub(c.readAt) < c.maxAge {
			defer c.mu.Unlock()
			return c.figures, c.err
		}
		if c.inflight == nil {
			break
		}
		wait := c.inflight
		c.mu.Unlock()
		<-wait
		c.mu.Lock()
	}
	done := make(chan struct{})
	c.inflight = done
	c.mu.Unlock()
	// Whatever happens to the query (a panic included), the scrapes
	// waiting for it are released.
	err = errors.New("metrics: the database query did not complete")
	defer func() {
		c.mu.Lock()
		c.figures, c.err, c.readAt, c.inflight = ms, err, c.now(), nil
		c.mu.Unlock()
		close(done)
	}()

	ctx, cancel := context.WithTimeout(context.Background(), MetricsQueryTimeout)
	defer cancel()
	if ms, err = c.load(ctx); err != nil {
		c.log.Warn().Str("event", "metrics.database_error").Err(err).
			Msg("metrics: the database queries failed; database metrics are missing until the next query")
	}
	return ms, err
}

// metricsOf turns the database figures into metrics.
func metricsOf(st *store.DatabaseStats) []prometheus.Metric {
	var out []prometheus.Metric
	counts(st.Runs, descRuns, &out)
	counts(st.Sessions, descSessions, &out)
	out = append(out, prometheus.MustNewConstMetric(descSteps, prometheus.CounterValue, float64(st.Steps)))
	var submissions int64
	var waitMS float64
	for _, u := range st.Usage {
		ok := strconv.FormatBool(u.Success)
		switch u.SourceType {
		case store.UsageModel:
			out = append(out, prometheus.MustNewConstMetric(descModelCalls, prometheus.CounterValue, float64(u.Count), ok))
		case store.UsageTool, store.UsageSubAgent:
			out = append(out, prometheus.MustNewConstMetric(descToolCalls, prometheus.CounterValue, float64(u.Count), u.SourceType, ok))
		case store.UsageClientToolWaitMS:
			submissions += u.Count
			waitMS += u.Sum
		}
	}
	out = append(out, prometheus.MustNewConstMetric(descSubmissions, prometheus.CounterValue, float64(submissions)),
		prometheus.MustNewConstMetric(descWait, prometheus.CounterValue, waitMS/1000))
	counts(st.PendingCalls, descPending, &out)
	for _, q := range st.Queues {
		out = append(out, prometheus.MustNewConstMetric(descQueueDepth, prometheus.GaugeValue, float64(q.Depth), q.Queue),
			prometheus.MustNewConstMetric(descQueueRunning, prometheus.GaugeValue, float64(q.Running), q.Queue),
			prometheus.MustNewConstMetric(descQueueOldest, prometheus.GaugeValue, q.OldestWaitSeconds, q.Queue))
	}
	for _, q := range st.QueueStarts {
		out = append(out, prometheus.MustNewConstMetric(descQueueStarted, prometheus.GaugeValue, float64(q.Started), q.Queue),
			prometheus.MustNewConstMetric(descQueueWait, prometheus.GaugeValue, q.AvgWaitSeconds, q.Queue))
	}
	return out
}

// counts turns (label, count) pairs into gauges of desc, by label.
func counts(m map[string]int64, desc *prometheus.Desc, out *[]prometheus.Metric) {
	for _, label := range slices.Sorted(maps.Keys(m)) {
		*out = append(*out, prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(m[label]), label))
	}
}
