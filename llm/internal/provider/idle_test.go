package provider_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/internal/provider"
)

// slowBody is a response body fed by the test: each string sent on lines
// is readable after the wait before it; closing lines ends the body. Like
// an HTTP transport, it breaks a pending read when the attempt's context
// is cancelled.
func slowBody(ctx context.Context, waits []time.Duration) io.ReadCloser {
	pr, pw := io.Pipe()
	stop := context.AfterFunc(ctx, func() { pr.CloseWithError(context.Cause(ctx)) })
	go func() {
		defer stop()
		for _, d := range waits {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return
			}
			if _, err := pw.Write([]byte("data: {}\n\n")); err != nil {
				return
			}
		}
		_ = pw.Close()
	}()
	return pr
}

// readAttempt reads a watched body to its end, as an adapter's stream
// parser does; forwarded says whether the attempt claims output.
func readAttempt(waits []time.Duration, forwarded bool, attempts *int) provider.Attempt {
	return func(ctx context.Context) (helix.StepResult, bool, *provider.Failure) {
		*attempts++
		body := provider.WatchBody(ctx, slowBody(ctx, waits))
		defer func() { _ = body.Close() }()
		if _, err := io.ReadAll(body); err != nil {
			return helix.StepResult{}, forwarded, provider.NewFailure(helix.CodeProviderUnavailable, true, 0, "x: the stream broke off: "+err.Error())
		}
		return helix.StepResult{Content: "done"}, forwarded, nil
	}
}

// Every read that returns bytes starts the countdown again: a stream
// that sends something more often than IdleTimeout lasts as long as it
// needs, far beyond IdleTimeout.
func TestIdleWatchdogResetsOnEveryRead(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := provider.Retry{Name: "x", MaxRetries: 0, IdleTimeout: 2 * time.Minute}
		waits := make([]time.Duration, 10)
		for i := range waits {
			waits[i] = 110 * time.Second
		}
		attempts := 0
		res, err := r.Do(t.Context(), readAttempt(waits, true, &attempts))
		require.NoError(t, err)
		require.Equal(t, "done", res.Content)
		require.Equal(t, 1, attempts)
	})
}

// A body that goes silent is abandoned after IdleTimeout with a
// recoverable provider_timeout that says what happened and what to set;
// it is retried while nothing was forwarded, and not once output went out.
func TestIdleWatchdogFires(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		forwarded bool
		attempts  int
	}{
		"before any output": {false, 3},
		"after output":      {true, 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				r := provider.Retry{Name: "x", MaxRetries: 2, MinBackoff: time.Second, MaxBackoff: time.Second, IdleTimeout: time.Minute}
				start := time.Now()
				attempts := 0
				// One event after 30s, then silence for an hour.
				_, err := r.Do(t.Context(), readAttempt([]time.Duration{30 * time.Second, time.Hour}, tc.forwarded, &attempts))
				require.Equal(t, tc.attempts, attempts)
				var me *helix.ModelError
				require.ErrorAs(t, err, &me)
				require.Equal(t, helix.CodeProviderTimeout, me.Code)
				require.True(t, me.Recoverable)
				require.Contains(t, me.Message, "x: the response sent nothing for 1m0s (Config.IdleTimeout)")
				require.Contains(t, me.Message, "raise Config.IdleTimeout")
				require.NotErrorIs(t, err, context.DeadlineExceeded, "the call's own deadline did not pass")
				// Each attempt lasts the 30s of its event and the minute of
				// silence, plus at most a second of backoff between them.
				elapsed := time.Since(start)
				perAttempt := 90 * time.Second
				require.GreaterOrEqual(t, elapsed, time.Duration(tc.attempts)*perAttempt)
				require.LessOrEqual(t, elapsed, time.Duration(tc.attempts)*(perAttempt+time.Second))
			})
		})
	}
}

// A negative IdleTimeout disables the watchdog: a long silence is waited
// out, and WatchBody returns the body as it is.
func TestIdleWatchdogDisabled(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := provider.Retry{Name: "x", IdleTimeout: -1}.WithDefaults()
		attempts := 0
		res, err := r.Do(t.Context(), readAttempt([]time.Duration{time.Hour}, true, &attempts))
		require.NoError(t, err)
		require.Equal(t, "done", res.Content)
	})
	body := io.NopCloser(strings.NewReader("x"))
	require.Equal(t, body, provider.WatchBody(t.Context(), body), "no watchdog outside Retry.Do")
}

// The watchdog of a finished attempt is released: the attempt's context
// ends with the attempt (releasing the transport's resources), cancelled
// rather than stalled.
func TestIdleWatchdogReleasedAfterAttempt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := provider.Retry{Name: "x", IdleTimeout: time.Second}
		ended := make(chan error, 1)
		_, err := r.Do(t.Context(), func(ctx context.Context) (helix.StepResult, bool, *provider.Failure) {
			context.AfterFunc(ctx, func() { ended <- context.Cause(ctx) })
			_ = provider.WatchBody(ctx, io.NopCloser(strings.NewReader("")))
			return helix.StepResult{}, false, nil
		})
		require.NoError(t, err)
		require.ErrorIs(t, <-ended, context.Canceled)
	})
}
