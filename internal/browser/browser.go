package browser

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// Environment variables read by [Find] and [New].
const (
	// EnvChromium names the Chromium (or Chrome) executable; unset means
	// DefaultChromium.
	EnvChromium = "HELIX_CHROMIUM"
	// EnvSkip=1 skips every browser test, loudly: the opt-out that
	// `HELIX_SKIP_BROWSER=1 scripts/test.sh` sets, as HELIX_SKIP_DOCKER=1 sets
	// HELIX_INTEGRATION_SKIP.
	EnvSkip = "HELIX_BROWSER_SKIP"
)

// DefaultChromium is the executable of Debian's chromium package, which
// scripts/chromium.sh installs.
const DefaultChromium = "/usr/bin/chromium"

// Defaults of [Opts].
const (
	// DefaultTimeout bounds each helper's wait.
	DefaultTimeout = 10 * time.Second
	// DefaultWidth and DefaultHeight are the window size in CSS pixels.
	DefaultWidth  = 1280
	DefaultHeight = 800
)

// startTimeout bounds Chromium's start and the tab's set-up, which run on a
// context that must not carry a deadline (the first chromedp action binds
// the browser's life to its context).
const startTimeout = 30 * time.Second

// ErrNotFound is wrapped by [Find]'s error when there is no Chromium to run.
var ErrNotFound = errors.New("chromium not found")

// Opts tune [New]. A nil *Opts means the defaults.
type Opts struct {
	// Header holds HTTP headers sent with every request of the tab, the
	// page's own fetches included (Network.setExtraHTTPHeaders), from the
	// first navigation on. Default: none.
	Header map[string]string
	// Timeout bounds each wait of the helpers (a navigation, a selector,
	// a text). Default: DefaultTimeout.
	Timeout time.Duration
	// Width and Height are the window size in CSS pixels, which full-page
	// screenshots start from. Default: DefaultWidth x DefaultHeight.
	Width, Height int
}

func (o *Opts) withDefaults() Opts {
	var r Opts
	if o != nil {
		r = *o
	}
	r.Timeout = cmp.Or(r.Timeout, DefaultTimeout)
	r.Width = cmp.Or(r.Width, DefaultWidth)
	r.Height = cmp.Or(r.Height, DefaultHeight)
	return r
}

// Find returns the Chromium executable the tests run: $HELIX_CHROMIUM, else
// DefaultChromium. When it is missing or not executable, the error wraps
// ErrNotFound and says how to install one.
func Find() (string, error) {
	exe := cmp.Or(os.Getenv(EnvChromium), DefaultChromium)
	path, err := exec.LookPath(exe)
	if err != nil {
		return "", fmt.Errorf("browser: Chromium not found at %s: run scripts/chromium.sh (installs Debian's chromium package) or set %s to a Chromium or Chrome executable (%s=1 skips the browser tests on purpose): %w: %w",
			exe, EnvChromium, EnvSkip, ErrNotFound, err)
	}
	return path, nil
}

// tab is what New keeps in the context for the helpers.
type tab struct {
	timeout  time.Duration
	problems *recorder // shared by the contexts WithTimeout derives
}

type tabKey struct{}

func tabOf(t testing.TB, ctx context.Context) *tab {
	t.Helper()
	tb, ok := ctx.Value(tabKey{}).(*tab)
	if !ok {
		t.Fatal("browser: the context does not come from browser.New")
	}
	return tb
}

// New starts a fresh headless Chromium for the test and returns the
// chromedp context of its one tab, which the other helpers take. The browser
// ends at the test's cleanup. The tab records problems (see [Problems]) from
// its first document on.
//
// The executable comes from [Find]; without one the test fails with Find's
// message, never skips, unless HELIX_BROWSER_SKIP=1 is set, which skips it
// loudly. Chromium runs with chromedp's defaults plus what these machines
// need (--headless --no-sandbox --disable-gpu --disable-quic --no-first-run
// --disable-background-networking --disable-component-update --disable-sync)
// and a new empty profile in t.TempDir(): without the networking flags its
// connections to Google's hosts are refused by a closed network, many at a
// time.
func New(t testing.TB, opts *Opts) context.Context {
	t.Helper()
	if os.Getenv(EnvSkip) == "1" {
		skipLoudly(t)
	}
	exe, err := Find()
	if err != nil {
		t.Fatal(err)
	}
	o := opts.withDefaults()
	tb := &tab{timeout: o.Timeout, problems: &recorder{}}
	out := &tailBuffer{max: 8 << 10}

	allocOpts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(o.Width, o.Height),
		// Chromium refuses to start as root with its sandbox; the pages
		// under test are the project's own.
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.CombinedOutput(out),
	)
	// Not t.Context(): it ends before the cleanups run, and the browser must
	// outlive the test's last helper call. The cleanup below ends it.
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), allocOpts...)
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithListener(tb.problems.listen))
	ctx = context.WithValue(ctx, tabKey{}, tb)
	t.Cleanup(func() {
		cancel()      // closes the tab and the browser
		cancelAlloc() // waits for the process to exit, before TempDir's removal
		if t.Failed() {
			t.Logf("browser: Chromium's output (the end, without D-Bus complaints):\n%s", out.String())
		}
	})

	start := []chromedp.Action[chromedp.Void]{}
	if len(o.Header) > 0 {
		h := make(network.Headers, len(o.Header))
		for k, v := range o.Header {
			h[k] = v
		}
		start = append(start, call(network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: h}))
	}
	watchdog := time.AfterFunc(startTimeout, cancelAlloc)
	err = chromedp.Do(ctx, start...)
	if !watchdog.Stop() {
		t.Fatalf("browser: %s did not start within %s: %v\nits output:\n%s", exe, startTimeout, err, out.String())
	}
	if err != nil {
		t.Fatalf("browser: start %s: %v\nits output:\n%s", exe, err, out.String())
	}
	return ctx
}

// WithTimeout returns a context for the same tab whose helpers wait up to d
// instead of the tab's Opts.Timeout: longer for one slow step, shorter for
// a test of a wait that must give up.
func WithTimeout(t testing.TB, ctx context.Context, d time.Duration) context.Context {
	t.Helper()
	tb := *tabOf(t, ctx)
	tb.timeout = d
	return context.WithValue(ctx, tabKey{}, &tb)
}

// skipLoudly skips with a message gotestsum and `go test -v` show for each
// skipped test, as scripts/test.sh's phase line does once.
func skipLoudly(t testing.TB) {
	t.Helper()
	t.Skip(fmt.Sprintf("!!! browser test SKIPPED: %s=1 (scripts/test.sh with HELIX_SKIP_BROWSER=1); unset it to run the browser tests !!!", EnvSkip))
}

// tailBuffer keeps the last max bytes written to it; Chromium writes from
// chromedp's goroutine.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if extra := b.buf.Len() - b.max; extra > 0 {
		b.buf.Next(extra)
	}
	return len(p), nil
}

// String returns the kept output without the lines of noise Chromium
// writes on every machine without a D-Bus (a container, CI) and Debian's
// launcher script's complaint about findmnt's output.
func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := strings.Split(b.buf.String(), "\n")
	kept := lines[:0]
	for _, l := range lines {
		if !strings.Contains(l, ":ERROR:dbus/") && !strings.Contains(l, "unexpected operator") {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n")
}
