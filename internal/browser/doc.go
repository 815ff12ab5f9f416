// Package browser runs the project's browser tests: it starts a fresh
// headless Chromium per test and gives _test files helpers that fail the
// test, with the page's URL and text, instead of returning errors.
//
//	func TestInspectorLists(t *testing.T) {
//		t.Parallel()
//		ctx := browser.New(t, nil)
//		browser.Navigate(t, ctx, srv.URL+"/inspector/", &browser.NavigateOpts{
//			SessionStorage: map[string]string{"helix.token": token},
//		})
//		browser.WaitText(t, ctx, "#sessions", "support-1")
//		browser.Click(t, ctx, "#sessions a")
//		browser.RequireNoProblems(t, ctx)
//	}
//
// The context New returns is a [chromedp] context: any chromedp action runs
// on it through [Do] (bounded, failing the test) or chromedp.Do itself.
//
// # Chromium
//
// The executable is $HELIX_CHROMIUM, else /usr/bin/chromium (Debian's
// chromium package, which scripts/chromium.sh installs and scripts/test.sh
// runs before the tests). Without it [New] fails the test and says how to
// install it: browser tests are never skipped silently. HELIX_BROWSER_SKIP=1
// (set by `HELIX_SKIP_BROWSER=1 scripts/test.sh`) skips them on purpose,
// loudly.
//
// Each test gets its own browser process with a profile in t.TempDir(),
// started with the flags this machine's closed network needs (no
// background networking, component updates, sync or QUIC; see [New]) and
// ended at the test's cleanup.
//
// # Problems
//
// From the start, the tab records what a page's user would see as errors in
// the DevTools console: uncaught exceptions and unhandled rejections,
// console.error calls, Content-Security-Policy violations (a blocked inline
// script among them) and the browser's other error-level log entries.
// [Problems] returns them, [RequireNoProblems] fails the test on any. Failed
// HTTP requests are not problems: a 401 is a page's normal answer without a
// token, and the page's own handling of it is what a test asserts.
package browser
