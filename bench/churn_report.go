package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/helix-agents/helix-dbos/engine"
)

// WriteText writes the churn report as text: the tables at the start, the
// plateau and the end, the growth of the total, the retention job's cost
// and autovacuum's counters.
func (r *ChurnReport) WriteText(w io.Writer) error {
	var b strings.Builder
	m, c := r.Machine, r.Config
	fmt.Fprintf(&b, "helix-dbos storage under churn (%.0f s)\n", r.DurationS)
	fmt.Fprintf(&b, "machine: %d CPU (%s), %.1f GiB, %s %s/%s\n", m.CPUs, orUnknown(m.CPUModel), m.MemoryGiB, m.GoVersion, m.OS, m.Arch)
	fmt.Fprintf(&b, "postgres: %s, host %s, pool of %d; autovacuum=%s naptime=%ss vacuum_scale_factor=%s threshold=%s\n",
		firstWords(m.Postgres, 2), m.DatabaseHost, m.PoolMaxConns, r.Autovacuum["autovacuum"], r.Autovacuum["autovacuum_naptime"],
		r.Autovacuum["autovacuum_vacuum_scale_factor"], r.Autovacuum["autovacuum_vacuum_threshold"])
	pace := "as fast as they go"
	if c.Rate > 0 {
		pace = fmt.Sprintf("at most %.0f started/s", c.Rate)
	}
	fmt.Fprintf(&b, "churn: %.0f s of %d sessions in flight (%s) × %d steps; retention %.0f s, a pass every %.0f s; a sample every %.0f s\n",
		c.DurationS, c.Sessions, pace, c.Steps, c.RetentionS, c.IntervalS, c.SampleS)
	fmt.Fprintf(&b, "sessions completed: %d (%.1f/s)\n\n", r.Sessions, r.SessionsPerSecond)

	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "table\trows start\tplateau (%.0f s)\tend\tkB start\tplateau\tend\tmax\tautovacuums\tmax dead\tmax dead ratio\tend dead ratio\t\n", r.PlateauS)
	var rows, bytes [3]int64
	var maxBytes int64
	for _, t := range r.Tables {
		if t.MaxBytes == 0 && t.Rows == [3]int64{} {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.2f\t\n", t.Name, t.Rows[0], t.Rows[1], t.Rows[2],
			t.Bytes[0]/1024, t.Bytes[1]/1024, t.Bytes[2]/1024, t.MaxBytes/1024, t.Autovacuums, t.MaxDead, t.MaxDeadRatio, t.EndDeadRatio)
		for i := range 3 {
			rows[i] += t.Rows[i]
			bytes[i] += t.Bytes[i]
		}
		maxBytes += t.MaxBytes
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t%d\t%d\t\t\t\t\t\t\n", rows[0], rows[1], rows[2], bytes[0]/1024, bytes[1]/1024, bytes[2]/1024)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(&b, "\ntotal size growth: %.0f kB/min over the first third of the samples, %.0f kB/min over the last third\n",
		r.FirstThirdBytesPerMin/1024, r.LastThirdBytesPerMin/1024)
	g := r.GC
	fmt.Fprintf(&b, "retention job: %d passes (%d batches) deleted %d sessions (%d rows, %d kB measured) in %.0f ms: %.3f ms per deleted session (longest pass %.0f ms; the %s pauses between batches included)\n",
		g.Passes, g.Batches, g.Sessions, g.Rows, g.Bytes/1024, g.TotalMS, g.MSPerSession, g.MaxMS, engine.GCBatchPause)
	b.WriteString("\ntotal per sample (s: sessions, rows, kB, dead tuples):")
	for i, t := range r.Totals {
		if i%6 == 0 {
			b.WriteString("\n ")
		}
		fmt.Fprintf(&b, " %4.0f: %d, %d, %d, %d;", t.AtS, t.Sessions, t.Rows, t.Bytes/1024, t.Dead)
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}
