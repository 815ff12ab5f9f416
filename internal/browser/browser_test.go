package browser_test

import (
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/helix-agents/helix-dbos/internal/browser"
)

// Every browser a test starts ends at its cleanup, and chromedp's
// goroutines with it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve starts a server on 127.0.0.1 with the given paths, each an HTML or
// JavaScript body (by its extension); headers go on every response.
func serve(t *testing.T, headers map[string]string, pages map[string]string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := pages[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		for k, v := range headers {
			w.Header().Set(k, v)
		}
		if strings.HasSuffix(r.URL.Path, ".js") {
			w.Header().Set("Content-Type", "text/javascript")
		} else {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
		}
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestClickChangesText(t *testing.T) {
	t.Parallel()
	srv := serve(t, nil, map[string]string{
		"/": `<!doctype html><title>click</title>
<button id="go">Go</button><p id="out">waiting</p><a id="next" href="/next">next</a>
<script src="/app.js"></script>`,
		"/next": `<!doctype html><title>next</title><h1 id="h">the next page</h1>`,
		"/app.js": `document.getElementById("go").addEventListener("click", () => {
  document.getElementById("out").textContent = "clicked";
});`,
	})
	ctx := browser.New(t, nil)
	browser.Navigate(t, ctx, srv.URL+"/", nil)
	require.Equal(t, "waiting", browser.Text(t, ctx, "#out"))
	browser.Click(t, ctx, "#go")
	require.Equal(t, "clicked", browser.WaitText(t, ctx, "#out", "clicked"))
	// A wait that starts before a navigation ends in the new document.
	browser.Click(t, ctx, "#next")
	require.Equal(t, "the next page", browser.WaitText(t, ctx, "#h", "next page"))
	browser.RequireNoProblems(t, ctx)
}

func TestCSPBlocksInlineScriptAndIsRecorded(t *testing.T) {
	t.Parallel()
	srv := serve(t, map[string]string{"Content-Security-Policy": "script-src 'self'"}, map[string]string{
		"/": `<!doctype html><title>csp</title>
<p id="external">external did not run</p><p id="inline">inline did not run</p>
<script>document.getElementById("inline").textContent = "inline ran";</script>
<script src="/app.js"></script>`,
		"/app.js": `document.getElementById("external").textContent = "external ran";`,
	})
	ctx := browser.New(t, nil)
	browser.Navigate(t, ctx, srv.URL+"/", nil)
	// The page's own script runs (script-src 'self' allows it); the inline
	// one, which came first, did not.
	browser.WaitText(t, ctx, "#external", "external ran")
	require.Equal(t, "inline did not run", browser.Text(t, ctx, "#inline"))

	problems := browser.Problems(t, ctx)
	require.Len(t, problems, 1, "%v", problems)
	require.Equal(t, browser.CSPViolation, problems[0].Kind, "%v", problems[0])
	require.Contains(t, problems[0].Text, "script-src 'self'")
	require.Contains(t, problems[0].Text, "inline")
}

func TestExceptionAndConsoleErrorAreRecorded(t *testing.T) {
	t.Parallel()
	srv := serve(t, nil, map[string]string{
		"/":      `<!doctype html><title>clean</title><p id="ok">fine</p>`,
		"/fails": `<!doctype html><title>fails</title><p id="ok">loaded</p><script src="/fails.js"></script>`,
		"/fails.js": `console.log("not a problem");
console.error("bad thing", 42);
Promise.reject(new Error("nobody caught me"));
throw new Error("boom 17");`,
	})
	ctx := browser.New(t, nil)
	browser.Navigate(t, ctx, srv.URL+"/", nil)
	browser.RequireNoProblems(t, ctx)

	browser.Navigate(t, ctx, srv.URL+"/fails", nil)
	browser.WaitText(t, ctx, "#ok", "loaded")
	byKind := map[browser.ProblemKind][]browser.Problem{}
	problems := browser.Problems(t, ctx)
	for _, p := range problems {
		byKind[p.Kind] = append(byKind[p.Kind], p)
	}
	require.Len(t, byKind[browser.ConsoleError], 1, "%v", problems)
	require.Equal(t, "bad thing 42", byKind[browser.ConsoleError][0].Text)
	require.Equal(t, srv.URL+"/fails.js", byKind[browser.ConsoleError][0].URL)
	require.Equal(t, int64(2), byKind[browser.ConsoleError][0].Line)

	exceptions := fmt.Sprint(byKind[browser.Exception])
	require.Len(t, byKind[browser.Exception], 2, "%v", problems)
	require.Contains(t, exceptions, "boom 17")
	require.Contains(t, exceptions, "nobody caught me")
	require.Len(t, problems, 3, "%v", problems)

	// What RequireNoProblems would report, here without ending this test.
	ft := runFake(func(ft testing.TB) { browser.RequireNoProblems(ft, ctx) })
	require.True(t, ft.failed)
	require.Contains(t, ft.msg, "the page had 3 problem(s)")
	require.Contains(t, ft.msg, "boom 17")
}

func TestScreenshotIsAFullPagePNG(t *testing.T) {
	t.Parallel()
	srv := serve(t, nil, map[string]string{
		"/": `<!doctype html><title>tall</title><body style="margin:0">
<div style="height:3000px;background:linear-gradient(#fff,#36c)">tall</div>`,
	})
	ctx := browser.New(t, &browser.Opts{Width: 800, Height: 600})
	browser.Navigate(t, ctx, srv.URL+"/", nil)
	path := filepath.Join(t.TempDir(), "shots", "tall.png")
	browser.Screenshot(t, ctx, path)

	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	require.Equal(t, 800, img.Bounds().Dx())
	require.Equal(t, 3000, img.Bounds().Dy(), "the whole page, beyond the 600-pixel window")
}

func TestSessionStorageAndHeaderBeforeThePageRuns(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]string{} // path -> X-Helix-Test header
	pages := map[string]string{
		"/": `<!doctype html><title>token</title>
<p id="token">none</p><p id="api">none</p><button id="logout">log out</button>
<script src="/app.js"></script>`,
		// What the inspector does at start: read the token, call the API.
		"/app.js": `const token = sessionStorage.getItem("helix.token");
document.getElementById("token").textContent = token === null ? "no token" : "token " + token;
fetch("/api").then(r => r.text()).then(s => { document.getElementById("api").textContent = s; });
document.getElementById("logout").addEventListener("click", () => {
  sessionStorage.removeItem("helix.token");
  document.getElementById("token").textContent = "logged out";
});`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path] = r.Header.Get("X-Helix-Test")
		mu.Unlock()
		if r.URL.Path == "/api" {
			_, _ = w.Write([]byte("api saw " + r.Header.Get("X-Helix-Test")))
			return
		}
		if strings.HasSuffix(r.URL.Path, ".js") {
			w.Header().Set("Content-Type", "text/javascript")
		}
		_, _ = w.Write([]byte(pages[r.URL.Path]))
	}))
	t.Cleanup(srv.Close)

	ctx := browser.New(t, &browser.Opts{Header: map[string]string{"X-Helix-Test": "h1"}})
	browser.Navigate(t, ctx, srv.URL+"/", &browser.NavigateOpts{
		SessionStorage: map[string]string{"helix.token": "s3cret"},
	})
	browser.WaitText(t, ctx, "#token", "token s3cret")
	browser.WaitText(t, ctx, "#api", "api saw h1")
	mu.Lock()
	require.Equal(t, map[string]string{"/": "h1", "/app.js": "h1", "/api": "h1"}, filterFavicon(seen))
	mu.Unlock()

	// The browser keeps the value for the tab, like one the page stored...
	browser.Do(t, ctx, chromedp.Reload())
	browser.WaitText(t, ctx, "#token", "token s3cret")
	// ...and a page that removes it has removed it: later documents do not
	// get it again.
	browser.Click(t, ctx, "#logout")
	browser.WaitText(t, ctx, "#token", "logged out")
	browser.Do(t, ctx, chromedp.Reload())
	browser.WaitText(t, ctx, "#token", "no token")
	browser.RequireNoProblems(t, ctx)
}

// filterFavicon drops the browser's own favicon request, if it made one.
func filterFavicon(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if k != "/favicon.ico" {
			out[k] = v
		}
	}
	return out
}

func TestWaitTimeoutSaysWhatThePageShows(t *testing.T) {
	t.Parallel()
	srv := serve(t, nil, map[string]string{
		"/": `<!doctype html><title>slow</title><h1>Sessions</h1><p id="state">loading forever</p>`,
	})
	ctx := browser.New(t, nil)
	browser.Navigate(t, ctx, srv.URL+"/", nil)
	ctx = browser.WithTimeout(t, ctx, 300*time.Millisecond)

	ft := runFake(func(ft testing.TB) { browser.WaitText(ft, ctx, "#state", "loaded") })
	require.True(t, ft.failed)
	require.Contains(t, ft.msg, `gave up after 300ms waiting for the text of #state to contain "loaded"`)
	require.Contains(t, ft.msg, "page "+srv.URL+"/")
	require.Contains(t, ft.msg, "text:\n  Sessions\n")
	require.Contains(t, ft.msg, "loading forever")

	ft = runFake(func(ft testing.TB) { browser.WaitVisible(ft, ctx, "#missing") })
	require.True(t, ft.failed)
	require.Contains(t, ft.msg, "waiting for #missing to be visible")
	require.Contains(t, ft.msg, "loading forever")
}

// The tests below change the environment, so they do not run in parallel.

func TestFindSaysHowToInstall(t *testing.T) {
	t.Setenv(browser.EnvChromium, "/nonexistent/chromium")
	_, err := browser.Find()
	require.ErrorIs(t, err, browser.ErrNotFound)
	require.Contains(t, err.Error(), "Chromium not found at /nonexistent/chromium: run scripts/chromium.sh (installs Debian's chromium package) or set HELIX_CHROMIUM")
}

func TestNewWithoutChromiumFailsUnlessOptedOut(t *testing.T) {
	t.Setenv(browser.EnvChromium, "/nonexistent/chromium")
	t.Setenv(browser.EnvSkip, "")
	ft := runFake(func(ft testing.TB) { browser.New(ft, nil) })
	require.True(t, ft.failed, "a missing Chromium fails the test")
	require.False(t, ft.skipped)
	require.Contains(t, ft.msg, "Chromium not found at /nonexistent/chromium: run scripts/chromium.sh")

	t.Setenv(browser.EnvSkip, "1")
	ft = runFake(func(ft testing.TB) { browser.New(ft, nil) })
	require.True(t, ft.skipped, "HELIX_BROWSER_SKIP=1 skips")
	require.False(t, ft.failed)
	require.Contains(t, ft.msg, "SKIPPED: HELIX_BROWSER_SKIP=1")
}

// fakeT stands for a test in a helper that is expected to fail it: Fatal
// and Skip record the message and end the goroutine, as testing.T does.
type fakeT struct {
	testing.TB
	mu      sync.Mutex
	failed  bool
	skipped bool
	msg     string
}

// runFake runs fn on a fakeT in a goroutine of its own and waits for it.
func runFake(fn func(testing.TB)) *fakeT {
	ft := &fakeT{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(ft)
	}()
	<-done
	return ft
}

func (f *fakeT) Helper() {}

func (f *fakeT) record(skip bool, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = f.failed || !skip
	f.skipped = f.skipped || skip
	f.msg += msg + "\n"
}

func (f *fakeT) Errorf(format string, args ...any) { f.record(false, fmt.Sprintf(format, args...)) }
func (f *fakeT) Fatal(args ...any)                 { f.record(false, fmt.Sprint(args...)); runtime.Goexit() }
func (f *fakeT) Fatalf(format string, args ...any) {
	f.record(false, fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (f *fakeT) Skip(args ...any) { f.record(true, fmt.Sprint(args...)); runtime.Goexit() }
