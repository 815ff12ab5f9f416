package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	helix "github.com/helix-agents/helix-dbos"
)

// DefaultIdleTimeout is how long a response body may send nothing before
// its attempt is abandoned; the adapters export it as their own.
const DefaultIdleTimeout = 5 * time.Minute

// errStalled is the cause with which the watchdog cancels an attempt.
var errStalled = errors.New("the response sent nothing for longer than the idle timeout")

// watchdogKey is the context key of an attempt's watchdog.
type watchdogKey struct{}

// watchdog cancels its attempt's context when the response body it
// watches delivers nothing for d. The default HTTP client has no overall
// timeout (a stream may rightly last many minutes) and the response
// header timeout ends with the headers, so without it a provider that
// keeps the connection open and stops sending holds the step forever.
type watchdog struct {
	d      time.Duration
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	timer    *time.Timer // nil until a body is watched
	fired    bool
	released bool
}

// watch returns the context of one attempt and its watchdog, which
// [WatchBody] arms; d <= 0 disables it (the watchdog is then nil, and its
// methods do nothing).
func watch(ctx context.Context, d time.Duration) (context.Context, *watchdog) {
	if d <= 0 {
		return ctx, nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	w := &watchdog{d: d, cancel: cancel}
	return context.WithValue(ctx, watchdogKey{}, w), w
}

// reset starts the countdown, or starts it again.
func (w *watchdog) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.released || w.fired:
	case w.timer == nil:
		w.timer = time.AfterFunc(w.d, w.fire)
	default:
		w.timer.Reset(w.d)
	}
}

func (w *watchdog) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.released {
		return
	}
	w.fired = true
	w.cancel(errStalled)
}

// release stops the watchdog and ends its context, once the attempt is
// over; it reports whether the watchdog had fired.
func (w *watchdog) release() (fired bool) {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.released = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.cancel(context.Canceled)
	return w.fired
}

// WatchBody returns body watched by the idle watchdog of ctx, the context
// of an attempt of [Retry.Do]: the countdown starts now (the response
// headers have arrived; the transport's response header timeout bounds
// the wait for them) and starts again at every read that returns bytes,
// so any event, line, keep-alive comment or ping keeps the attempt alive.
// When it runs out, the attempt's context is cancelled, which breaks the
// pending read, and Do reports [IdleFailure]. A body whose context has no
// watchdog (a disabled one, a call outside Do) is returned as it is.
func WatchBody(ctx context.Context, body io.ReadCloser) io.ReadCloser {
	w, _ := ctx.Value(watchdogKey{}).(*watchdog)
	if w == nil || body == nil {
		return body
	}
	w.reset()
	return &watchedBody{ReadCloser: body, w: w}
}

type watchedBody struct {
	io.ReadCloser
	w *watchdog
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.w.reset()
	}
	return n, err
}

// IdleFailure reports an attempt whose response sent nothing for
// idleTimeout: a recoverable provider_timeout (a stalled connection or
// provider; the next attempt may well go through), retried while nothing
// was forwarded.
func IdleFailure(name string, idleTimeout time.Duration) *Failure {
	f := NewFailure(helix.CodeProviderTimeout, true, 0, fmt.Sprintf(
		"%s: the response sent nothing for %s (Config.IdleTimeout) although the connection stayed open, so the call was abandoned as stalled: the step can be run again; raise Config.IdleTimeout if the model pauses that long on purpose (a reasoning model that thinks silently), or set it negative to turn the watchdog off",
		name, idleTimeout))
	f.Cause = errStalled
	return f
}
