package bench

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// sqlTracer counts the statements run on the pool and the time spent in
// them and in waiting for a connection. The cost is a clock read and a map
// update per statement: microseconds against the milliseconds measured.
type sqlTracer struct {
	mu       sync.Mutex
	byText   map[string]*statementStat
	trips    int64 // round trips: a statement, a prepare, a connect or a batch
	acquires int64
	waited   time.Duration
}

type statementStat struct {
	count int64
	total time.Duration
}

var (
	_ pgx.QueryTracer       = (*sqlTracer)(nil)
	_ pgx.BatchTracer       = (*sqlTracer)(nil)
	_ pgx.PrepareTracer     = (*sqlTracer)(nil)
	_ pgx.ConnectTracer     = (*sqlTracer)(nil)
	_ pgxpool.AcquireTracer = (*sqlTracer)(nil)
)

// traceStartKey carries a traceStart from a Trace*Start to its end.
var traceStartKey = traceKey{}

type traceKey struct{}

type traceStart struct {
	sql string
	at  time.Time
	// batch collects a batch's statements until its end.
	batch *[]string
}

func newSQLTracer() *sqlTracer { return &sqlTracer{byText: map[string]*statementStat{}} }

func (t *sqlTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, traceStartKey, traceStart{sql: data.SQL, at: time.Now()})
}

func (t *sqlTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	s, ok := ctx.Value(traceStartKey).(traceStart)
	if !ok {
		return
	}
	d := time.Since(s.at)
	t.mu.Lock()
	t.trips++
	t.count(s.sql, d)
	t.mu.Unlock()
}

func (t *sqlTracer) count(sql string, d time.Duration) {
	st := t.byText[sql]
	if st == nil {
		st = &statementStat{}
		t.byText[sql] = st
	}
	st.count++
	st.total += d
}

// A batch is one round trip for all its statements; each statement is
// counted under its text with an equal share of the batch's time.
func (t *sqlTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return context.WithValue(ctx, traceStartKey, traceStart{at: time.Now(), batch: new([]string)})
}

func (t *sqlTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if s, ok := ctx.Value(traceStartKey).(traceStart); ok && s.batch != nil {
		*s.batch = append(*s.batch, data.SQL)
	}
}

func (t *sqlTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	s, ok := ctx.Value(traceStartKey).(traceStart)
	if !ok || s.batch == nil {
		return
	}
	d := time.Since(s.at)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.trips++
	for _, sql := range *s.batch {
		t.count(sql, d/time.Duration(max(1, len(*s.batch))))
	}
}

// Preparing a statement is a round trip of its own (pgx prepares each new
// statement text once per connection); it is counted under its text.
func (t *sqlTracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, data pgx.TracePrepareStartData) context.Context {
	return context.WithValue(ctx, traceStartKey, traceStart{sql: "PREPARE " + data.SQL, at: time.Now()})
}

func (t *sqlTracer) TracePrepareEnd(ctx context.Context, c *pgx.Conn, _ pgx.TracePrepareEndData) {
	t.TraceQueryEnd(ctx, c, pgx.TraceQueryEndData{})
}

func (t *sqlTracer) TraceConnectStart(ctx context.Context, _ pgx.TraceConnectStartData) context.Context {
	return context.WithValue(ctx, traceStartKey, traceStart{sql: "CONNECT", at: time.Now()})
}

func (t *sqlTracer) TraceConnectEnd(ctx context.Context, _ pgx.TraceConnectEndData) {
	t.TraceQueryEnd(ctx, nil, pgx.TraceQueryEndData{})
}

func (t *sqlTracer) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return context.WithValue(ctx, traceStartKey, traceStart{at: time.Now()})
}

func (t *sqlTracer) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireEndData) {
	s, ok := ctx.Value(traceStartKey).(traceStart)
	if !ok {
		return
	}
	d := time.Since(s.at)
	t.mu.Lock()
	t.acquires++
	t.waited += d
	t.mu.Unlock()
}

// sqlSnapshot is the tracer's counters at one instant.
type sqlSnapshot struct {
	byText   map[string]statementStat
	trips    int64
	acquires int64
	waited   time.Duration
}

func (t *sqlTracer) snapshot() sqlSnapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := sqlSnapshot{byText: make(map[string]statementStat, len(t.byText)), trips: t.trips, acquires: t.acquires, waited: t.waited}
	for k, v := range t.byText {
		s.byText[k] = *v
	}
	return s
}

// add accumulates into s what ran between before and after, so the
// intervals of many samples make one profile (profile(sqlSnapshot{}, s, …)).
func (s *sqlSnapshot) add(before, after sqlSnapshot) {
	if s.byText == nil {
		s.byText = map[string]statementStat{}
	}
	for text, a := range after.byText {
		b := before.byText[text]
		if a.count == b.count {
			continue
		}
		st := s.byText[text]
		st.count += a.count - b.count
		st.total += a.total - b.total
		s.byText[text] = st
	}
	s.trips += after.trips - before.trips
	s.acquires += after.acquires - before.acquires
	s.waited += after.waited - before.waited
}

// SQLProfile is what a phase ran on the pool, per agent step (or per floor
// sample).
type SQLProfile struct {
	// StatementsPerStep counts statements, BEGIN/COMMIT included, and
	// prepares.
	StatementsPerStep float64 `json:"statementsPerStep"`
	// RoundTripsPerStep counts round trips to Postgres: a statement, a
	// prepare, or a batch of statements sent together (pipelined).
	RoundTripsPerStep float64 `json:"roundTripsPerStep"`
	// StatementMSPerStep is the client-side time inside statements.
	StatementMSPerStep float64 `json:"statementMsPerStep"`
	// AcquireWaitMSPerStep is the time spent waiting for a pool
	// connection.
	AcquireWaitMSPerStep float64 `json:"acquireWaitMsPerStep"`
	// Top lists the statements by total time, most expensive first.
	Top []StatementProfile `json:"top,omitempty"`
}

// StatementProfile is one statement text's share of a phase.
type StatementProfile struct {
	// SQL is the statement, whitespace collapsed and cut at 100 characters.
	SQL            string  `json:"sql"`
	PerStep        float64 `json:"perStep"`
	MSPerStep      float64 `json:"msPerStep"`
	MeanMS         float64 `json:"meanMs"`
	sortKey        time.Duration
	totalStatement int64
}

// profile returns what ran between before and after, per unit (n units),
// with the top statements by time. Statement texts that collapse to the
// same prefix are merged.
func profile(before, after sqlSnapshot, n, top int) SQLProfile {
	if n <= 0 {
		return SQLProfile{}
	}
	merged := map[string]*StatementProfile{}
	var count int64
	var total time.Duration
	for text, a := range after.byText {
		b := before.byText[text]
		c, d := a.count-b.count, a.total-b.total
		if c == 0 {
			continue
		}
		count += c
		total += d
		key := shortSQL(text)
		p := merged[key]
		if p == nil {
			p = &StatementProfile{SQL: key}
			merged[key] = p
		}
		p.totalStatement += c
		p.sortKey += d
	}
	out := SQLProfile{
		StatementsPerStep:    round3(float64(count) / float64(n)),
		RoundTripsPerStep:    round3(float64(after.trips-before.trips) / float64(n)),
		StatementMSPerStep:   round3(float64(total) / float64(time.Millisecond) / float64(n)),
		AcquireWaitMSPerStep: round3(float64(after.waited-before.waited) / float64(time.Millisecond) / float64(n)),
	}
	list := make([]*StatementProfile, 0, len(merged))
	for _, p := range merged {
		p.PerStep = round3(float64(p.totalStatement) / float64(n))
		p.MSPerStep = round3(float64(p.sortKey) / float64(time.Millisecond) / float64(n))
		p.MeanMS = round3(float64(p.sortKey) / float64(time.Millisecond) / float64(p.totalStatement))
		list = append(list, p)
	}
	slices.SortFunc(list, func(a, b *StatementProfile) int {
		return cmp.Or(cmp.Compare(b.sortKey, a.sortKey), strings.Compare(a.SQL, b.SQL))
	})
	for _, p := range list[:min(top, len(list))] {
		out.Top = append(out.Top, *p)
	}
	return out
}

// shortSQL collapses whitespace and cuts long statements.
func shortSQL(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 100 {
		s = string(r[:100]) + "…"
	}
	return s
}

func round3(f float64) float64 {
	return float64(int64(f*1000+0.5)) / 1000
}

// growth lists the statements whose time per step grew the most between two
// windows of n steps each (e0–e1 and l0–l1), at most top of them, growing
// ones only.
func growth(e0, e1, l0, l1 sqlSnapshot, n, top int) []StatementGrowth {
	if n <= 0 {
		return nil
	}
	perStep := func(a, b sqlSnapshot) map[string]time.Duration {
		out := map[string]time.Duration{}
		for text, st := range b.byText {
			if d := st.total - a.byText[text].total; d > 0 {
				out[shortSQL(text)] += d
			}
		}
		return out
	}
	early, late := perStep(e0, e1), perStep(l0, l1)
	var out []StatementGrowth
	for text, l := range late {
		if e := early[text]; l > e {
			out = append(out, StatementGrowth{SQL: text,
				EarlyMSPerStep: round3(float64(e) / float64(time.Millisecond) / float64(n)),
				LateMSPerStep:  round3(float64(l) / float64(time.Millisecond) / float64(n))})
		}
	}
	slices.SortFunc(out, func(a, b StatementGrowth) int {
		return cmp.Or(cmp.Compare(b.LateMSPerStep-b.EarlyMSPerStep, a.LateMSPerStep-a.EarlyMSPerStep), strings.Compare(a.SQL, b.SQL))
	})
	return out[:min(top, len(out))]
}
