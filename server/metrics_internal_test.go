package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// The database figures of /metrics are read at most once per maxAge:
// concurrent scrapes share one query, later scrapes within maxAge reuse
// its figures, and a failed query is remembered as long (a struggling
// database is not asked again by every scrape).
func TestDatabaseMetricsCachedAndShared(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var loads atomic.Int32
		release := make(chan struct{})
		fail := false
		c := &dbCollector{maxAge: 15 * time.Second, log: zerolog.Nop(), now: time.Now,
			load: func(ctx context.Context) ([]prometheus.Metric, error) {
				n := loads.Add(1)
				<-release
				if fail {
					return nil, errors.New("database down")
				}
				return []prometheus.Metric{prometheus.MustNewConstMetric(descSteps, prometheus.CounterValue, float64(n))}, nil
			}}
		var wg sync.WaitGroup
		first := make([][]prometheus.Metric, 10)
		for i := range first {
			wg.Go(func() {
				ms, err := c.snapshot()
				require.NoError(t, err)
				first[i] = ms
			})
		}
		synctest.Wait() // every scrape waits: one in the query, the others for it
		require.EqualValues(t, 1, loads.Load(), "ten concurrent scrapes, one query")
		close(release)
		wg.Wait()
		for _, ms := range first {
			require.Same(t, first[0][0], ms[0], "they share its figures")
		}

		time.Sleep(14 * time.Second)
		ms, err := c.snapshot()
		require.NoError(t, err)
		require.Same(t, first[0][0], ms[0], "a scrape within maxAge reuses the figures")
		require.EqualValues(t, 1, loads.Load())

		time.Sleep(2 * time.Second)
		ms, err = c.snapshot()
		require.NoError(t, err)
		require.NotSame(t, first[0][0], ms[0], "older figures are read again")
		require.EqualValues(t, 2, loads.Load())

		fail = true
		time.Sleep(16 * time.Second)
		_, err = c.snapshot()
		require.ErrorContains(t, err, "database down")
		_, err = c.snapshot()
		require.ErrorContains(t, err, "database down", "the failure is remembered")
		require.EqualValues(t, 3, loads.Load())

		// Collect reports the failure as helix_database_up 0 and nothing else.
		ch := make(chan prometheus.Metric, 10)
		c.Collect(ch)
		close(ch)
		var got []*prometheus.Desc
		for m := range ch {
			got = append(got, m.Desc())
		}
		require.Equal(t, []*prometheus.Desc{descUp}, got)
	})
}
