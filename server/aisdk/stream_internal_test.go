package aisdk

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// A stream checks its run's status only while no chunk arrives: the
// first check PollInterval after the last chunk, then with a doubling
// pause up to MaxPollInterval; every chunk starts over.
func TestIdlePollBacksOffAndResets(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := newIdlePoll(100*time.Millisecond, 1*time.Second)
		defer p.stop()
		start := time.Now()
		var at []time.Duration
		for range 6 { // an idle stream: every check finds the run going on
			<-p.c()
			at = append(at, time.Since(start))
			p.backOff()
		}
		require.Equal(t, []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 700 * time.Millisecond,
			1500 * time.Millisecond, 2500 * time.Millisecond, 3500 * time.Millisecond}, at)

		// Chunks every 50 ms: no check is due while they flow.
		for range 20 {
			time.Sleep(50 * time.Millisecond)
			select {
			case <-p.c():
				t.Fatal("a status check while chunks flow")
			default:
			}
			p.activity()
		}
		start = time.Now()
		<-p.c()
		require.Equal(t, 100*time.Millisecond, time.Since(start), "after the last chunk, the first check comes soon")
	})
}

// The warnings of failed status checks (every open stream fails its
// checks during a database outage) are let through once per period, with
// the count of those held back.
func TestRateLimiter(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	l := newRateLimiter(30*time.Second, func() time.Time { return now })
	n, ok := l.allow()
	require.True(t, ok)
	require.Zero(t, n)
	for range 5 {
		now = now.Add(time.Second)
		_, ok = l.allow()
		require.False(t, ok)
	}
	now = now.Add(25 * time.Second)
	n, ok = l.allow()
	require.True(t, ok)
	require.Equal(t, 5, n, "the warning says how many were held back")
	_, ok = l.allow()
	require.False(t, ok)
}
