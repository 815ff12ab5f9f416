package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDistribution(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // unsorted input
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	d := distribution(ds)
	require.Equal(t, Distribution{Count: 100, MeanMS: 50.5, P50MS: 50, P95MS: 95, P99MS: 99, MaxMS: 100}, d)
	require.Equal(t, 100*time.Millisecond, ds[0], "the input is not reordered")
	require.Equal(t, Distribution{}, distribution(nil))
	require.InDelta(t, 7.0, distribution([]time.Duration{7 * time.Millisecond}).P99MS, 1e-9)
}

func TestSlopePer1000(t *testing.T) {
	t.Parallel()
	flat := []time.Duration{2 * time.Millisecond, 2 * time.Millisecond, 2 * time.Millisecond}
	require.Zero(t, slopePer1000(flat))
	var growing []time.Duration
	for i := range 1000 { // +1 µs per step: +1 ms per 1000 steps
		growing = append(growing, 2*time.Millisecond+time.Duration(i)*time.Microsecond)
	}
	require.InDelta(t, 1.0, slopePer1000(growing), 0.001)
}

func TestWindows(t *testing.T) {
	t.Parallel()
	samples := make([]time.Duration, 999) // a 1000-step session
	for i := range samples {
		samples[i] = time.Duration(i + 1) // sample i is step i+1
	}
	early, late, first := windows(samples)
	require.Equal(t, 10, first)
	require.Len(t, early, 50)
	require.Equal(t, time.Duration(10), early[0])
	require.Len(t, late, 50)
	require.Equal(t, time.Duration(999), late[len(late)-1])

	early, late, _ = windows(samples[:9]) // short: the windows do not overlap
	require.Len(t, early, 2)
	require.Len(t, late, 2)
	require.Less(t, early[len(early)-1], late[0])
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	c := Config{DatabaseURL: "postgres://x"}
	require.NoError(t, c.withDefaults())
	require.Equal(t, DefaultSteps, c.Steps)
	require.Equal(t, DefaultSessions, c.Sessions)
	for _, bad := range []Config{{}, {DatabaseURL: "postgres://x", Steps: 1}, {DatabaseURL: "postgres://x", MaxConns: -1}} {
		require.Error(t, bad.withDefaults())
	}
}
