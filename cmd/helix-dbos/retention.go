package main

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/helix-agents/helix-dbos/engine"
)

// addRetentionFlags adds serve's retention settings; bare leaves every
// default out (for `config`).
func addRetentionFlags(f *pflag.FlagSet, bare bool) {
	interval, batch := engine.DefaultRetentionInterval, engine.DefaultGCBatchSize
	if bare {
		interval, batch = 0, 0
	}
	f.String("retention-completed", "", "delete completed sessions whose last activity is older than this, as 30d, 12h or 1d12h; empty keeps them forever (env HELIX_RETENTION_COMPLETED)")
	f.String("retention-failed", "", "delete failed sessions whose last activity is older than this; empty keeps them forever (env HELIX_RETENTION_FAILED)")
	f.String("retention-aborted", "", "delete aborted sessions whose last activity is older than this; empty keeps them forever (env HELIX_RETENTION_ABORTED)")
	f.Bool("retention-keep-expired", false, "with a retention age set, keep sessions past their expiresAt (by default the retention job deletes them once no run is in progress) (env HELIX_RETENTION_KEEP_EXPIRED)")
	f.Duration("retention-interval", interval, "time between two retention passes; one engine of the cluster runs a pass at a time (env HELIX_RETENTION_INTERVAL)")
	f.Int("retention-batch", batch, "session trees a retention pass deletes per transaction (env HELIX_RETENTION_BATCH)")
}

// checkAge accepts an age as parseAge reads it, or "" (keep forever).
func checkAge(v any) error {
	if s, ok := v.(string); ok && s != "" {
		_, err := parseAge(s)
		return err
	}
	return nil
}

// retentionPolicy is the engine's retention of serve's configuration: nil
// (no job, every session kept) unless an age is set.
func (c config) retentionPolicy() (*engine.RetentionPolicy, error) {
	p := &engine.RetentionPolicy{KeepExpired: c.RetentionKeepExpired, Interval: c.RetentionInterval, BatchSize: c.RetentionBatch}
	for _, a := range []struct {
		name, v string
		to      *time.Duration
	}{{"retention-completed", c.RetentionCompleted, &p.Completed}, {"retention-failed", c.RetentionFailed, &p.Failed},
		{"retention-aborted", c.RetentionAborted, &p.Aborted}} {
		if a.v == "" {
			continue
		}
		d, err := parseAge(a.v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.name, err)
		}
		if d == 0 {
			return nil, fmt.Errorf("%s: 0 would delete every ended session at once: give an age such as 30d, or leave it empty to keep them forever", a.name)
		}
		*a.to = d
	}
	if p.Completed == 0 && p.Failed == 0 && p.Aborted == 0 {
		return nil, nil
	}
	return p, nil
}

// describeRetention says what the retention job deletes.
func describeRetention(p *engine.RetentionPolicy) string {
	var parts []string
	for _, a := range []struct {
		name string
		d    time.Duration
	}{{"completed", p.Completed}, {"failed", p.Failed}, {"aborted", p.Aborted}} {
		if a.d == 0 {
			parts = append(parts, a.name+" kept forever")
		} else {
			parts = append(parts, fmt.Sprintf("%s after %s", a.name, formatAge(a.d)))
		}
	}
	if p.KeepExpired {
		parts = append(parts, "expired sessions kept")
	} else {
		parts = append(parts, "expired sessions deleted")
	}
	return fmt.Sprintf("sessions deleted in the background (%s), a pass every %s",
		strings.Join(parts, ", "), cmp.Or(p.Interval, engine.DefaultRetentionInterval))
}

// formatAge prints whole days as 30d.
func formatAge(d time.Duration) string {
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}
