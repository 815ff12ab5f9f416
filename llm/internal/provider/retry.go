package provider

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	helix "github.com/helix-agents/helix-dbos"
)

// Retry defaults; the adapters export them as their own DefaultXxx.
const (
	DefaultMaxRetries    = 3
	DefaultMinBackoff    = 500 * time.Millisecond
	DefaultMaxBackoff    = 20 * time.Second
	DefaultMaxRetryAfter = 60 * time.Second
)

// Retry is how an adapter runs the attempts of a call: its retry policy
// and the idle watchdog of each attempt, made of its Config's MaxRetries,
// MinBackoff, MaxBackoff, MaxRetryAfter and IdleTimeout (see the adapters'
// Config for their meaning).
type Retry struct {
	// Name is the adapter's name, which starts its messages: "openai".
	Name string
	// MaxRetries is how many times a failed attempt is sent again: 0
	// means DefaultMaxRetries, a negative value none.
	MaxRetries int
	// MinBackoff is the wait before the first retry, doubled at each
	// retry; MaxBackoff caps the waits of that exponential backoff.
	MinBackoff, MaxBackoff time.Duration
	// MaxRetryAfter is the longest Retry-After that is waited for (0
	// means DefaultMaxRetryAfter); a failure asking for a longer wait is
	// returned at once, saying how long the provider asked to wait.
	MaxRetryAfter time.Duration
	// IdleTimeout is how long the body of a response may send nothing
	// before the attempt is abandoned (see [WatchBody]): 0 means
	// DefaultIdleTimeout, a negative value disables the watchdog.
	IdleTimeout time.Duration
}

// WithDefaults returns r with its zero fields set to their defaults and a
// negative MaxRetries set to 0. A negative IdleTimeout stays negative
// (disabled).
func (r Retry) WithDefaults() Retry {
	switch {
	case r.MaxRetries == 0:
		r.MaxRetries = DefaultMaxRetries
	case r.MaxRetries < 0:
		r.MaxRetries = 0
	}
	r.MinBackoff = cmp.Or(r.MinBackoff, DefaultMinBackoff)
	r.MaxBackoff = cmp.Or(r.MaxBackoff, DefaultMaxBackoff)
	r.MaxRetryAfter = cmp.Or(r.MaxRetryAfter, DefaultMaxRetryAfter)
	r.IdleTimeout = cmp.Or(r.IdleTimeout, DefaultIdleTimeout)
	return r
}

// Validate reports invalid durations of a defaulted policy, naming the
// Config fields.
func (r Retry) Validate() error {
	if r.MinBackoff < 0 || r.MaxBackoff < 0 {
		return fmt.Errorf("%s: Config.MinBackoff and MaxBackoff must be >= 0, got %s and %s", r.Name, r.MinBackoff, r.MaxBackoff)
	}
	if r.MinBackoff > r.MaxBackoff {
		return fmt.Errorf("%s: Config.MinBackoff (%s) must not exceed MaxBackoff (%s)", r.Name, r.MinBackoff, r.MaxBackoff)
	}
	if r.MaxRetryAfter < 0 {
		return fmt.Errorf("%s: Config.MaxRetryAfter must be >= 0 (0 means %s), got %s", r.Name, DefaultMaxRetryAfter, r.MaxRetryAfter)
	}
	return nil
}

// Attempt sends a request once and reads its response. forwarded reports
// whether any delta reached the callbacks.
type Attempt func(ctx context.Context) (res helix.StepResult, forwarded bool, f *Failure)

// Do runs attempt until it succeeds, and retries a failed attempt (see
// [Failure.Retry]) up to r.MaxRetries times, but only while nothing has
// been forwarded: once a delta reached the callbacks a failure is
// returned, so the engine runs the step again with a clean stream. The
// wait between attempts is the failure's Retry-After when it has one, else
// [Backoff]'s; the context ends it. A Retry-After longer than
// r.MaxRetryAfter is not waited for: the failure is returned at once, its
// message saying how long the provider asked to wait. A failure after
// retries says how many attempts were made. r must be defaulted.
//
// Each attempt runs in a context of its own that carries the idle
// watchdog (see [WatchBody]): an attempt whose response went silent for
// r.IdleTimeout fails with [IdleFailure]'s failure, whatever the attempt
// reported.
//
// Every error Do returns is a *[Failure]; one caused by the context is
// [ContextFailure]'s, whatever the attempt reported.
func (r Retry) Do(ctx context.Context, attempt Attempt) (helix.StepResult, error) {
	for retry := 0; ; retry++ {
		if ctx.Err() != nil {
			return helix.StepResult{}, ContextFailure(ctx, r.Name)
		}
		actx, w := watch(ctx, r.IdleTimeout)
		res, forwarded, f := attempt(actx)
		stalled := w.release()
		if f == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return helix.StepResult{}, ContextFailure(ctx, r.Name)
		}
		if stalled {
			f = IdleFailure(r.Name, r.IdleTimeout)
		}
		if !forwarded && f.Retry && f.HasRetryAfter && f.RetryAfter > r.MaxRetryAfter {
			// Waiting that long would hold the agent's step (and its
			// worker) for longer than the user allowed; retrying earlier
			// would only be rejected again.
			f.Model.Message += fmt.Sprintf(" (the provider asked to wait %s before retrying, more than Config.MaxRetryAfter (%s), so the request was not retried: run the step again later, or raise Config.MaxRetryAfter)",
				f.RetryAfter, r.MaxRetryAfter)
			return helix.StepResult{}, attempts(f, retry)
		}
		if forwarded || !f.Retry || retry >= r.MaxRetries {
			return helix.StepResult{}, attempts(f, retry)
		}
		wait := f.RetryAfter
		if !f.HasRetryAfter {
			wait = Backoff(retry, r.MinBackoff, r.MaxBackoff)
		}
		if !Sleep(ctx, wait) {
			return helix.StepResult{}, ContextFailure(ctx, r.Name)
		}
	}
}

// attempts returns f, whose message says how many attempts were made
// when there was more than one.
func attempts(f *Failure, retry int) *Failure {
	if retry > 0 {
		f.Model.Message += fmt.Sprintf(" (after %d attempts)", retry+1)
	}
	return f
}

// RetryAfterBound bounds a parsed Retry-After, so that the arithmetic on it
// cannot overflow; any wait that long is far above every MaxRetryAfter.
const RetryAfterBound = 24 * time.Hour

// ParseRetryAfter reads retry-after-ms (milliseconds, sent by Azure OpenAI
// and Anthropic) or Retry-After (delay-seconds or an HTTP date, relative to
// now). ok is false when neither header holds a wait.
func ParseRetryAfter(h http.Header, now time.Time) (d time.Duration, ok bool) {
	if v := strings.TrimSpace(h.Get("retry-after-ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return min(time.Duration(min(ms, float64(RetryAfterBound/time.Millisecond))*float64(time.Millisecond)), RetryAfterBound), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(min(secs, RetryAfterBound.Seconds()) * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), RetryAfterBound), true
	}
	return 0, false
}

// Backoff returns the exponential wait before retry number retry (0 for
// the first), used when the failure has no Retry-After: minB doubled per
// retry, capped by maxB, with equal jitter (half fixed, half random) so
// that clients rate limited together do not retry together.
func Backoff(retry int, minB, maxB time.Duration) time.Duration {
	d := maxB
	if retry < 32 {
		if e := minB << retry; e > 0 && e < maxB {
			d = e
		}
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// Sleep waits d or until ctx is done; it reports whether d elapsed.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
