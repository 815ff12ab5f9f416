package provider_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/internal/provider"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 4, 9, 12, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		header http.Header
		want   time.Duration
		ok     bool
	}{
		"seconds":         {http.Header{"Retry-After": {"7"}}, 7 * time.Second, true},
		"fractional":      {http.Header{"Retry-After": {"1.5"}}, 1500 * time.Millisecond, true},
		"http date":       {http.Header{"Retry-After": {"Wed, 09 Apr 2025 12:00:30 GMT"}}, 30 * time.Second, true},
		"past date":       {http.Header{"Retry-After": {"Wed, 09 Apr 2025 11:00:00 GMT"}}, 0, true},
		"milliseconds":    {http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"9"}}, 250 * time.Millisecond, true},
		"huge":            {http.Header{"Retry-After": {"1e300"}}, provider.RetryAfterBound, true},
		"huge integer":    {http.Header{"Retry-After": {"99999999999"}}, provider.RetryAfterBound, true},
		"huge ms":         {http.Header{"Retry-After-Ms": {"1e300"}}, provider.RetryAfterBound, true},
		"negative":        {http.Header{"Retry-After": {"-3"}}, 0, false},
		"garbage":         {http.Header{"Retry-After": {"soon"}}, 0, false},
		"absent":          {http.Header{}, 0, false},
		"bad ms, seconds": {http.Header{"Retry-After-Ms": {"x"}, "Retry-After": {"2"}}, 2 * time.Second, true},
	} {
		got, ok := provider.ParseRetryAfter(tc.header, now)
		require.Equal(t, tc.ok, ok, name)
		require.Equal(t, tc.want, got, name)
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	minB, maxB := 100*time.Millisecond, time.Second
	for retry := range 40 {
		want := min(minB<<min(retry, 20), maxB)
		for range 20 {
			d := provider.Backoff(retry, minB, maxB)
			require.GreaterOrEqual(t, d, want/2, "retry %d", retry)
			require.LessOrEqual(t, d, want, "retry %d", retry)
		}
	}
}

func TestRetryDefaultsAndValidate(t *testing.T) {
	t.Parallel()
	r := provider.Retry{Name: "x"}.WithDefaults()
	require.Equal(t, provider.Retry{Name: "x", MaxRetries: provider.DefaultMaxRetries,
		MinBackoff: provider.DefaultMinBackoff, MaxBackoff: provider.DefaultMaxBackoff,
		MaxRetryAfter: provider.DefaultMaxRetryAfter, IdleTimeout: provider.DefaultIdleTimeout}, r)
	require.NoError(t, r.Validate())
	require.Zero(t, provider.Retry{MaxRetries: -1}.WithDefaults().MaxRetries, "a negative MaxRetries disables retries")
	require.Equal(t, -time.Second, provider.Retry{IdleTimeout: -time.Second}.WithDefaults().IdleTimeout, "a negative IdleTimeout stays: disabled")
	require.EqualError(t, provider.Retry{Name: "x", MinBackoff: -1, MaxBackoff: 1}.Validate(),
		"x: Config.MinBackoff and MaxBackoff must be >= 0, got -1ns and 1ns")
	require.EqualError(t, provider.Retry{Name: "x", MinBackoff: 2, MaxBackoff: 1}.Validate(),
		"x: Config.MinBackoff (2ns) must not exceed MaxBackoff (1ns)")
	require.EqualError(t, provider.Retry{Name: "x", MaxRetryAfter: -time.Second}.Validate(),
		"x: Config.MaxRetryAfter must be >= 0 (0 means 1m0s), got -1s")
}

// Do retries a recoverable failure only while nothing was forwarded, and
// says how many attempts it made.
func TestRetryDo(t *testing.T) {
	t.Parallel()
	r := provider.Retry{Name: "x", MaxRetries: 2, MinBackoff: time.Microsecond, MaxBackoff: time.Microsecond}
	unavailable := func() *provider.Failure {
		return provider.NewFailure(helix.CodeProviderUnavailable, true, 503, "x: down")
	}
	for name, tc := range map[string]struct {
		forwarded   bool
		failure     func() *provider.Failure
		attempts    int
		wantMessage string
	}{
		"recoverable, retried to the limit": {false, unavailable, 3, "x: down (after 3 attempts)"},
		"not retried after output":          {true, unavailable, 1, "x: down"},
		"not recoverable": {false, func() *provider.Failure {
			return provider.NewFailure(helix.CodeProviderAuth, false, 401, "x: no")
		}, 1, "x: no"},
	} {
		attempts := 0
		_, err := r.Do(t.Context(), func(context.Context) (helix.StepResult, bool, *provider.Failure) {
			attempts++
			return helix.StepResult{}, tc.forwarded, tc.failure()
		})
		var me *helix.ModelError
		require.ErrorAs(t, err, &me, name)
		require.Equal(t, tc.wantMessage, me.Message, name)
		require.Equal(t, tc.attempts, attempts, name)
	}

	attempts := 0
	res, err := r.Do(t.Context(), func(context.Context) (helix.StepResult, bool, *provider.Failure) {
		attempts++
		if attempts == 1 {
			return helix.StepResult{}, false, unavailable()
		}
		return helix.StepResult{Content: "ok"}, true, nil
	})
	require.NoError(t, err)
	require.Equal(t, "ok", res.Content)
}

// A context that ends during an attempt wins over the attempt's failure:
// the error matches the context's error and cause.
func TestRetryDoContext(t *testing.T) {
	t.Parallel()
	errStop := errors.New("stop")
	ctx, cancel := context.WithCancelCause(t.Context())
	r := provider.Retry{Name: "x", MaxRetries: 5, MinBackoff: time.Hour, MaxBackoff: time.Hour}
	_, err := r.Do(ctx, func(context.Context) (helix.StepResult, bool, *provider.Failure) {
		cancel(errStop)
		return helix.StepResult{}, false, provider.NewFailure(helix.CodeProviderUnavailable, true, 0, "x: down")
	})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, errStop)
	var me *helix.ModelError
	require.ErrorAs(t, err, &me)
	require.Equal(t, helix.CodeProviderError, me.Code)
	require.Equal(t, "x: the call was cancelled before the model finished", me.Message)
}

// rateLimited returns a 429 failure asking to wait d.
func rateLimited(d time.Duration) *provider.Failure {
	f := provider.NewFailure(helix.CodeProviderRateLimited, true, http.StatusTooManyRequests, "x: slow down")
	f.RetryAfter, f.HasRetryAfter = d, true
	return f
}

// A Retry-After up to MaxRetryAfter is waited for in full, even when it
// exceeds MaxBackoff (which caps only the exponential backoff): retrying
// earlier is rejected again and wastes the attempts.
func TestRetryDoHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := provider.Retry{Name: "x", MaxRetries: 3, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond, MaxRetryAfter: time.Minute}
		var at []time.Time
		res, err := r.Do(t.Context(), func(context.Context) (helix.StepResult, bool, *provider.Failure) {
			at = append(at, time.Now())
			if len(at) < 3 {
				return helix.StepResult{}, false, rateLimited(time.Minute)
			}
			return helix.StepResult{Content: "ok"}, true, nil
		})
		require.NoError(t, err)
		require.Equal(t, "ok", res.Content)
		require.Len(t, at, 3)
		require.Equal(t, time.Minute, at[1].Sub(at[0]), "the Retry-After, not MaxBackoff")
		require.Equal(t, time.Minute, at[2].Sub(at[1]))
	})
}

// A Retry-After longer than MaxRetryAfter is not waited for: the failure
// is returned at once, still recoverable, saying how long the provider
// asked to wait and what to change.
func TestRetryDoRetryAfterTooLong(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := provider.Retry{Name: "x", MaxRetries: 3, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond, MaxRetryAfter: 50 * time.Millisecond}
		start := time.Now()
		attempts := 0
		_, err := r.Do(t.Context(), func(context.Context) (helix.StepResult, bool, *provider.Failure) {
			attempts++
			if attempts == 1 {
				return helix.StepResult{}, false, rateLimited(20 * time.Millisecond)
			}
			return helix.StepResult{}, false, rateLimited(90 * time.Second)
		})
		require.Equal(t, 2, attempts, "the short wait is honoured, the long one is not")
		require.Equal(t, 20*time.Millisecond, time.Since(start), "no wait after the long Retry-After")
		var me *helix.ModelError
		require.ErrorAs(t, err, &me)
		require.Equal(t, helix.CodeProviderRateLimited, me.Code)
		require.True(t, me.Recoverable)
		require.Equal(t, http.StatusTooManyRequests, me.StatusCode)
		require.Equal(t, "x: slow down (the provider asked to wait 1m30s before retrying, more than Config.MaxRetryAfter (50ms), "+
			"so the request was not retried: run the step again later, or raise Config.MaxRetryAfter) (after 2 attempts)", me.Message)

		// The message says so without retries left too.
		r.MaxRetries = 0
		_, err = r.Do(t.Context(), func(context.Context) (helix.StepResult, bool, *provider.Failure) {
			return helix.StepResult{}, false, rateLimited(time.Hour)
		})
		require.ErrorAs(t, err, &me)
		require.Contains(t, me.Message, "the provider asked to wait 1h0m0s before retrying")
	})
}

// Without a Retry-After the wait is the exponential backoff, capped by
// MaxBackoff.
func TestRetryDoBackoffWithoutRetryAfter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := provider.Retry{Name: "x", MaxRetries: 1, MinBackoff: time.Second, MaxBackoff: time.Second, MaxRetryAfter: time.Hour}
		var at []time.Time
		_, err := r.Do(t.Context(), func(context.Context) (helix.StepResult, bool, *provider.Failure) {
			at = append(at, time.Now())
			return helix.StepResult{}, false, provider.NewFailure(helix.CodeProviderUnavailable, true, 503, "x: down")
		})
		require.Error(t, err)
		require.Len(t, at, 2)
		gap := at[1].Sub(at[0])
		require.GreaterOrEqual(t, gap, time.Second/2)
		require.LessOrEqual(t, gap, time.Second)
	})
}
