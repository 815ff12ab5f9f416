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
	DefaultMaxRetries = 3
	DefaultMinBackoff = 500 * time.Millisecond
	DefaultMaxBackoff = 20 * time.Second
)

// Retry is an adapter's retry policy, made of its Config's MaxRetries,
// MinBackoff and MaxBackoff (see the adapters' Config for their meaning).
type Retry struct {
	// Name is the adapter's name, which starts its messages: "openai".
	Name string
	// MaxRetries is how many times a failed attempt is sent again: 0
	// means DefaultMaxRetries, a negative value none.
	MaxRetries int
	// MinBackoff is the wait before the first retry, doubled at each
	// retry; MaxBackoff caps every wait, a Retry-After included.
	MinBackoff, MaxBackoff time.Duration
}

// WithDefaults returns r with its zero fields set to their defaults and a
// negative MaxRetries set to 0.
func (r Retry) WithDefaults() Retry {
	switch {
	case r.MaxRetries == 0:
		r.MaxRetries = DefaultMaxRetries
	case r.MaxRetries < 0:
		r.MaxRetries = 0
	}
	r.MinBackoff = cmp.Or(r.MinBackoff, DefaultMinBackoff)
	r.MaxBackoff = cmp.Or(r.MaxBackoff, DefaultMaxBackoff)
	return r
}

// Validate reports invalid backoffs of a defaulted policy, naming the
// Config fields.
func (r Retry) Validate() error {
	if r.MinBackoff < 0 || r.MaxBackoff < 0 {
		return fmt.Errorf("%s: Config.MinBackoff and MaxBackoff must be >= 0, got %s and %s", r.Name, r.MinBackoff, r.MaxBackoff)
	}
	if r.MinBackoff > r.MaxBackoff {
		return fmt.Errorf("%s: Config.MinBackoff (%s) must not exceed MaxBackoff (%s)", r.Name, r.MinBackoff, r.MaxBackoff)
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
// wait between attempts is [Backoff]'s; the context ends it. A failure
// after retries says how many attempts were made. r must be defaulted.
//
// Every error Do returns is a *[Failure]; one caused by the context is
// [ContextFailure]'s, whatever the attempt reported.
func (r Retry) Do(ctx context.Context, attempt Attempt) (helix.StepResult, error) {
	for retry := 0; ; retry++ {
		if ctx.Err() != nil {
			return helix.StepResult{}, ContextFailure(ctx, r.Name)
		}
		res, forwarded, f := attempt(ctx)
		if f == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return helix.StepResult{}, ContextFailure(ctx, r.Name)
		}
		if forwarded || !f.Retry || retry >= r.MaxRetries {
			if retry > 0 {
				f.Model.Message += fmt.Sprintf(" (after %d attempts)", retry+1)
			}
			return helix.StepResult{}, f
		}
		if !Sleep(ctx, Backoff(retry, r.MinBackoff, r.MaxBackoff, f)) {
			return helix.StepResult{}, ContextFailure(ctx, r.Name)
		}
	}
}

// MaxRetryAfter bounds a parsed Retry-After before MaxBackoff caps it, so
// the arithmetic cannot overflow.
const MaxRetryAfter = 24 * time.Hour

// ParseRetryAfter reads retry-after-ms (milliseconds, sent by Azure OpenAI
// and Anthropic) or Retry-After (delay-seconds or an HTTP date, relative to
// now). ok is false when neither header holds a wait.
func ParseRetryAfter(h http.Header, now time.Time) (d time.Duration, ok bool) {
	if v := strings.TrimSpace(h.Get("retry-after-ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return min(time.Duration(min(ms, float64(MaxRetryAfter/time.Millisecond))*float64(time.Millisecond)), MaxRetryAfter), true
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
		return time.Duration(min(secs, MaxRetryAfter.Seconds()) * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), MaxRetryAfter), true
	}
	return 0, false
}

// Backoff returns the wait before retry number retry (0 for the first)
// after f: its Retry-After when it has one, else minB doubled per retry;
// capped by maxB, with equal jitter (half fixed, half random) on the
// exponential wait so that clients rate limited together do not retry
// together.
func Backoff(retry int, minB, maxB time.Duration, f *Failure) time.Duration {
	if f.HasRetryAfter {
		return min(f.RetryAfter, maxB)
	}
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
