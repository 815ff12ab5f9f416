package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/helix-agents/helix-dbos/engine"
)

// Defaults of ChurnConfig.
const (
	// DefaultChurnDuration is how long the churn mode starts sessions.
	DefaultChurnDuration = 3 * time.Minute
	// DefaultChurnRetention is how long a completed session is kept.
	DefaultChurnRetention = 20 * time.Second
	// DefaultChurnInterval is the retention job's interval.
	DefaultChurnInterval = 5 * time.Second
	// DefaultChurnSessions is the number of sessions in flight.
	DefaultChurnSessions = 8
	// DefaultChurnSteps is the length of each session: short agent runs,
	// one no-op tool call per step but the last.
	DefaultChurnSteps = 5
	// DefaultChurnRate is the pace at which sessions start: steady, and
	// below what a busy 2-vCPU machine sustains, so the live set (rate ×
	// retention) stays the same through the run and a growing size means
	// growing storage, not a faster machine.
	DefaultChurnRate = 30
	// DefaultChurnSample is the time between two table samples.
	DefaultChurnSample = 5 * time.Second
)

// ChurnConfig configures Churn. Only DatabaseURL is required.
type ChurnConfig struct {
	// DatabaseURL is the scratch database, as Config.DatabaseURL. Churn
	// deletes the completed sessions of every agent type in it that are
	// older than Retention: use a scratch database.
	DatabaseURL string
	// Duration is how long sessions are started (default
	// DefaultChurnDuration); the sessions in flight then finish.
	Duration time.Duration
	// Retention is the engine's RetentionPolicy.Completed (default
	// DefaultChurnRetention).
	Retention time.Duration
	// Interval is the retention job's interval (default
	// DefaultChurnInterval, at least engine.MinRetentionInterval).
	Interval time.Duration
	// Sessions is the number of sessions in flight (default
	// DefaultChurnSessions); each worker starts the next when its session
	// completes.
	Sessions int
	// Steps is the length of each session (default DefaultChurnSteps, at
	// least 2).
	Steps int
	// Rate is the sessions started per second at most (default
	// DefaultChurnRate; negative for as fast as the Sessions workers go).
	Rate float64
	// Sample is the time between two samples of the tables (default
	// DefaultChurnSample).
	Sample time.Duration
	// MaxConns is as Config.MaxConns.
	MaxConns int
	// Progress is as Config.Progress.
	Progress func(string)
}

func (c *ChurnConfig) withDefaults() error {
	c.Duration = cmp.Or(c.Duration, DefaultChurnDuration)
	c.Retention = cmp.Or(c.Retention, DefaultChurnRetention)
	c.Interval = cmp.Or(c.Interval, DefaultChurnInterval)
	c.Sessions = cmp.Or(c.Sessions, DefaultChurnSessions)
	c.Steps = cmp.Or(c.Steps, DefaultChurnSteps)
	c.Sample = cmp.Or(c.Sample, DefaultChurnSample)
	c.Rate = cmp.Or(c.Rate, DefaultChurnRate)
	c.Progress = serialProgress(c.Progress)
	switch {
	case c.DatabaseURL == "":
		return errors.New("bench: ChurnConfig.DatabaseURL is empty: give the URL of a scratch database")
	case c.Duration < 0 || c.Retention < 0 || c.Sample < 0:
		return fmt.Errorf("bench: churn Duration, Retention and Sample must not be negative, got %s, %s, %s", c.Duration, c.Retention, c.Sample)
	case c.Interval < engine.MinRetentionInterval:
		return fmt.Errorf("bench: churn Interval must be at least %s, got %s", engine.MinRetentionInterval, c.Interval)
	case c.Sessions < 1:
		return fmt.Errorf("bench: churn Sessions must be >= 1, got %d", c.Sessions)
	case c.Steps < 2:
		return fmt.Errorf("bench: churn Steps must be >= 2, got %d", c.Steps)
	case c.MaxConns < 0:
		return fmt.Errorf("bench: MaxConns must be >= 0 (0 for the pool's default), got %d", c.MaxConns)
	}
	return nil
}

// ChurnReport is the outcome of Churn: the tables of schemas helix and
// dbos sampled while sessions start, complete and are deleted.
type ChurnReport struct {
	Machine Machine           `json:"machine"`
	Config  ChurnReportConfig `json:"config"`
	// Autovacuum holds the server's autovacuum settings.
	Autovacuum map[string]string `json:"autovacuum"`
	// Sessions counts the sessions completed.
	Sessions int `json:"sessions"`
	// SessionsPerSecond is Sessions over the run's time.
	SessionsPerSecond float64 `json:"sessionsPerSecond"`
	// Tables are the helix and dbos tables, by total size at the end.
	Tables []ChurnTable `json:"tables"`
	// Totals are the sum over Tables at every sample.
	Totals []ChurnTotal `json:"totals"`
	// PlateauS is the time of the plateau sample (two thirds of the run).
	PlateauS float64 `json:"plateauS"`
	// FirstThirdBytesPerMin and LastThirdBytesPerMin are the growth rate
	// of the total size over the first and the last third of the samples.
	FirstThirdBytesPerMin float64 `json:"firstThirdBytesPerMin"`
	LastThirdBytesPerMin  float64 `json:"lastThirdBytesPerMin"`
	// GC sums the retention job's passes.
	GC ChurnGC `json:"gc"`
	// DurationS is how long Churn took.
	DurationS float64 `json:"durationS"`
}

// ChurnReportConfig is the configuration a churn report was measured with.
type ChurnReportConfig struct {
	DurationS  float64 `json:"durationS"`
	RetentionS float64 `json:"retentionS"`
	IntervalS  float64 `json:"intervalS"`
	Sessions   int     `json:"sessions"`
	Steps      int     `json:"steps"`
	// Rate is the pace of session starts, per second; 0 for none.
	Rate    float64 `json:"rate"`
	SampleS float64 `json:"sampleS"`
}

// ChurnTable is one table at the start, the plateau and the end.
type ChurnTable struct {
	Name string `json:"name"`
	// Rows (exact counts) and Bytes (pg_total_relation_size) at the start,
	// the plateau and the end.
	Rows  [3]int64 `json:"rows"`
	Bytes [3]int64 `json:"bytes"`
	// MaxBytes is the largest size sampled.
	MaxBytes int64 `json:"maxBytes"`
	// Autovacuums counts the autovacuum runs during Churn.
	Autovacuums int64 `json:"autovacuums"`
	// MaxDeadRatio and EndDeadRatio are n_dead_tup/(n_live_tup+n_dead_tup)
	// at its highest sample and at the end.
	MaxDeadRatio float64 `json:"maxDeadRatio"`
	EndDeadRatio float64 `json:"endDeadRatio"`
	// MaxDead is the largest n_dead_tup sampled.
	MaxDead int64 `json:"maxDead"`
	// LastAutovacuum is pg_stat_user_tables.last_autovacuum at the end.
	LastAutovacuum *time.Time `json:"lastAutovacuum"`
}

// ChurnTotal is the sum over the tables at one sample.
type ChurnTotal struct {
	AtS   float64 `json:"atS"`
	Rows  int64   `json:"rows"`
	Bytes int64   `json:"bytes"`
	Dead  int64   `json:"dead"`
	// Sessions counts the rows of helix.sessions.
	Sessions int64 `json:"sessions"`
}

// ChurnGC sums the passes of the engine's retention job, as logged in its
// gc.pass events.
type ChurnGC struct {
	Passes int `json:"passes"`
	// Batches counts the passes' delete transactions; a pass pauses
	// engine.GCBatchPause after each full batch, inside its time.
	Batches  int     `json:"batches"`
	Sessions int64   `json:"sessions"`
	Rows     int64   `json:"rows"`
	Bytes    int64   `json:"bytes"`
	TotalMS  float64 `json:"totalMs"`
	MaxMS    float64 `json:"maxMs"`
	// MSPerSession is TotalMS over Sessions: the pass's time (select,
	// measure, delete, commit) per deleted session.
	MSPerSession float64 `json:"msPerSession"`
}

// tableSample is one table at one sample.
type tableSample struct {
	rows, bytes, live, dead, autovacuums int64
	last                                 *time.Time
}

// Churn runs sessions continuously for cfg.Duration on an engine whose
// retention job deletes completed sessions older than cfg.Retention, and
// samples the helix and dbos tables to show whether their size reaches a
// plateau. It asserts nothing about timing.
func Churn(ctx context.Context, cfg ChurnConfig) (*ChurnReport, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	began := time.Now()
	gcLog := &gcLog{}
	logger := zerolog.New(gcLog).Level(zerolog.InfoLevel)
	h, err := newHarness(ctx, Config{DatabaseURL: cfg.DatabaseURL, MaxConns: cfg.MaxConns, Progress: cfg.Progress}, cfg.Steps,
		func(ec *engine.Config) {
			ec.Retention = &engine.RetentionPolicy{Completed: cfg.Retention, KeepExpired: true, Interval: cfg.Interval}
			ec.Logger = &logger
		})
	if err != nil {
		return nil, err
	}
	defer h.close(ctx)
	r := &ChurnReport{Config: ChurnReportConfig{DurationS: cfg.Duration.Seconds(), RetentionS: cfg.Retention.Seconds(),
		IntervalS: cfg.Interval.Seconds(), Sessions: cfg.Sessions, Steps: cfg.Steps, SampleS: cfg.Sample.Seconds(), Rate: max(cfg.Rate, 0)}}
	if r.Machine, err = describeMachine(ctx, h.pool); err != nil {
		return nil, fmt.Errorf("bench: describe the database: %w", err)
	}
	if r.Autovacuum, err = autovacuumSettings(ctx, h); err != nil {
		return nil, err
	}

	var samples []map[string]tableSample
	var at []time.Duration
	sample := func() error {
		s, err := h.sampleTables(ctx)
		if err != nil {
			return err
		}
		samples, at = append(samples, s), append(at, time.Since(began))
		return nil
	}
	if err := sample(); err != nil {
		return nil, err
	}
	var completed atomic.Int64
	stop := h.every2s(func() string {
		g := gcLog.sum()
		return fmt.Sprintf("churn: %s/%s, %d sessions completed, %d deleted in %d passes", time.Since(began).Round(time.Second), cfg.Duration,
			completed.Load(), g.Sessions, g.Passes)
	})
	defer stop()
	wctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	// pace lets one session start per tick; a tick no worker is ready for
	// is dropped, so a slow spell is not followed by a burst.
	var pace <-chan time.Time
	if cfg.Rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / cfg.Rate))
		defer t.Stop()
		pace = t.C
	}
	errs := make([]error, cfg.Sessions)
	var wg sync.WaitGroup
	for i := range cfg.Sessions {
		wg.Go(func() {
			for wctx.Err() == nil {
				if pace != nil {
					select {
					case <-pace:
					case <-wctx.Done():
						return
					}
				}
				r, err := h.start(ctx, cfg.Steps)
				if err == nil {
					err = h.wait(ctx, r) // the session in flight finishes after Duration
					h.script.remove(r.handle.SessionID)
				}
				if err != nil {
					errs[i] = err
					cancel()
					return
				}
				completed.Add(1)
			}
		})
	}
	tick := time.NewTicker(cfg.Sample)
	for loop := true; loop; {
		select {
		case <-wctx.Done():
			loop = false
		case <-tick.C:
			if err := sample(); err != nil {
				tick.Stop()
				cancel()
				wg.Wait()
				return nil, err
			}
		}
	}
	tick.Stop()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("bench: churn: %w", err)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err := sample(); err != nil {
		return nil, err
	}
	run := time.Since(began)
	r.Sessions = int(completed.Load())
	r.SessionsPerSecond = round3(float64(r.Sessions) / run.Seconds())
	r.GC = gcLog.sum()
	r.summarize(samples, at)
	r.DurationS = round3(time.Since(began).Seconds())
	return r, nil
}

// summarize fills the tables, the totals and the growth rates.
func (r *ChurnReport) summarize(samples []map[string]tableSample, at []time.Duration) {
	n := len(samples)
	plateau := (2 * (n - 1)) / 3
	r.PlateauS = round3(at[plateau].Seconds())
	first, last := samples[0], samples[n-1]
	for name, end := range last {
		t := ChurnTable{Name: name}
		for i, s := range []tableSample{first[name], samples[plateau][name], end} {
			t.Rows[i], t.Bytes[i] = s.rows, s.bytes
		}
		t.Autovacuums = end.autovacuums - first[name].autovacuums
		t.LastAutovacuum = end.last
		for _, all := range samples {
			s := all[name]
			t.MaxBytes = max(t.MaxBytes, s.bytes)
			t.MaxDead = max(t.MaxDead, s.dead)
			t.MaxDeadRatio = max(t.MaxDeadRatio, deadRatio(s))
		}
		t.EndDeadRatio = deadRatio(end)
		r.Tables = append(r.Tables, t)
	}
	sort.Slice(r.Tables, func(i, j int) bool {
		a, b := r.Tables[i], r.Tables[j]
		if a.Bytes[2] != b.Bytes[2] {
			return a.Bytes[2] > b.Bytes[2]
		}
		return a.Name < b.Name
	})
	for i, s := range samples {
		tot := ChurnTotal{AtS: round3(at[i].Seconds()), Sessions: s["helix.sessions"].rows}
		for _, t := range s {
			tot.Rows += t.rows
			tot.Bytes += t.bytes
			tot.Dead += t.dead
		}
		r.Totals = append(r.Totals, tot)
	}
	rate := func(a, b int) float64 {
		if b <= a {
			return 0
		}
		return round3(float64(r.Totals[b].Bytes-r.Totals[a].Bytes) / (r.Totals[b].AtS - r.Totals[a].AtS) * 60)
	}
	third := (n - 1) / 3
	r.FirstThirdBytesPerMin = rate(0, third)
	r.LastThirdBytesPerMin = rate(n-1-third, n-1)
}

func deadRatio(s tableSample) float64 {
	if s.live+s.dead == 0 {
		return 0
	}
	return round3(float64(s.dead) / float64(s.live+s.dead))
}

// sampleTables reads every table of schemas helix and dbos: its exact row
// count, total size and pg_stat_user_tables counters. The tables are small
// under churn, so the counts are cheap.
func (h *harness) sampleTables(ctx context.Context) (map[string]tableSample, error) {
	rows, err := h.pool.Query(ctx, `SELECT schemaname || '.' || relname, pg_total_relation_size(relid), n_live_tup, n_dead_tup,
		autovacuum_count, last_autovacuum FROM pg_stat_user_tables WHERE schemaname IN ('helix', 'dbos') AND relname NOT LIKE 'goose%'`)
	if err != nil {
		return nil, fmt.Errorf("bench: sample the tables: %w", err)
	}
	out := map[string]tableSample{}
	var names []string
	for rows.Next() {
		var name string
		var s tableSample
		if err := rows.Scan(&name, &s.bytes, &s.live, &s.dead, &s.autovacuums, &s.last); err != nil {
			rows.Close()
			return nil, fmt.Errorf("bench: sample the tables: %w", err)
		}
		out[name] = s
		names = append(names, name)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("bench: sample the tables: %w", err)
	}
	for _, name := range names {
		s := out[name]
		schema, rel, _ := strings.Cut(name, ".")
		if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, rel}.Sanitize()).Scan(&s.rows); err != nil {
			return nil, fmt.Errorf("bench: count the rows of %s: %w", name, err)
		}
		out[name] = s
	}
	return out, nil
}

// autovacuumSettings returns the server's autovacuum settings.
func autovacuumSettings(ctx context.Context, h *harness) (map[string]string, error) {
	rows, err := h.pool.Query(ctx, `SELECT name, setting FROM pg_settings WHERE name IN ('autovacuum', 'autovacuum_naptime',
		'autovacuum_vacuum_scale_factor', 'autovacuum_vacuum_threshold', 'autovacuum_vacuum_insert_scale_factor', 'autovacuum_vacuum_cost_limit')`)
	if err != nil {
		return nil, fmt.Errorf("bench: read the autovacuum settings: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}

// gcLog receives the engine's log and sums its gc.pass events (the
// retention job reports each pass there and nowhere else with its time).
type gcLog struct {
	mu sync.Mutex
	gc ChurnGC
}

// Write takes one zerolog JSON line.
func (l *gcLog) Write(p []byte) (int, error) {
	var ev struct {
		Event    string  `json:"event"`
		Sessions int64   `json:"sessions"`
		Rows     int64   `json:"rows"`
		Bytes    int64   `json:"bytes"`
		Batches  int     `json:"batches"`
		Took     float64 `json:"took"` // zerolog's default: milliseconds
	}
	if json.Unmarshal(p, &ev) != nil || ev.Event != "gc.pass" {
		return len(p), nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gc.Passes++
	l.gc.Sessions += ev.Sessions
	l.gc.Batches += ev.Batches
	l.gc.Rows += ev.Rows
	l.gc.Bytes += ev.Bytes
	l.gc.TotalMS += ev.Took
	l.gc.MaxMS = max(l.gc.MaxMS, ev.Took)
	return len(p), nil
}

func (l *gcLog) sum() ChurnGC {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.gc
	g.TotalMS, g.MaxMS = round3(g.TotalMS), round3(g.MaxMS)
	if g.Sessions > 0 {
		g.MSPerSession = round3(g.TotalMS / float64(g.Sessions))
	}
	return g
}
