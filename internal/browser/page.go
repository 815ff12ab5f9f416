package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// NavigateOpts tune [Navigate]. A nil *NavigateOpts means the defaults.
type NavigateOpts struct {
	// SessionStorage is written into the new document's sessionStorage
	// before any of its scripts runs, in the top frame: a value a page reads
	// at start (the inspector's bearer token, "helix.token") is there as if
	// an earlier page had stored it. Only the document this navigation loads
	// gets it; the browser then keeps it for the origin, in this tab, like
	// any sessionStorage value (a reload still has it, a page that removes it
	// removes it). Default: none.
	SessionStorage map[string]string
}

// Navigate loads url in the tab and waits for its load event, failing the
// test if that does not come within the tab's timeout.
func Navigate(t testing.TB, ctx context.Context, url string, opts *NavigateOpts) {
	t.Helper()
	if opts != nil && len(opts.SessionStorage) > 0 {
		// A script evaluated when each new document is created, before the
		// page's own; removed once this navigation's document has loaded, so
		// that later documents start with what the page left.
		entries, err := json.Marshal(opts.SessionStorage)
		if err != nil {
			t.Fatalf("browser: session storage: %v", err)
		}
		script := fmt.Sprintf(`if (window === window.top) { for (const [k, v] of Object.entries(%s)) sessionStorage.setItem(k, v); }`, entries)
		added, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: script})
		if err != nil {
			t.Fatalf("browser: add the session storage script: %v", err)
		}
		defer func() {
			_, err := chromedp.Call(context.WithoutCancel(ctx), page.RemoveScriptToEvaluateOnNewDocument,
				page.RemoveScriptToEvaluateOnNewDocumentParams{Identifier: added.Identifier})
			if err != nil {
				t.Errorf("browser: remove the session storage script: %v", err)
			}
		}()
	}
	Do(t, ctx, chromedp.Navigate(url))
}

// Do runs chromedp actions on the tab, all of them within the tab's
// timeout, and fails the test with the page's URL, the start of its text and
// the problems so far if one fails.
func Do(t testing.TB, ctx context.Context, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, tabOf(t, ctx).timeout)
	defer cancel()
	if err := chromedp.Do(tctx, actions...); err != nil {
		t.Fatalf("browser: %v\n%s", err, describe(ctx))
	}
}

// Eval evaluates a JavaScript expression in the page and returns its value
// decoded into T (as chromedp.Evaluate does; a promise is awaited), failing
// the test if it throws or does not finish within the tab's timeout.
func Eval[T any](t testing.TB, ctx context.Context, expression string) T {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, tabOf(t, ctx).timeout)
	defer cancel()
	v, err := chromedp.Run(tctx, chromedp.Evaluate[T](expression, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("browser: evaluate %q: %v\n%s", expression, err, describe(ctx))
	}
	return v
}

// WaitVisible waits until an element matching the CSS selector is visible.
func WaitVisible(t testing.TB, ctx context.Context, selector string) {
	t.Helper()
	wait(t, ctx, fmt.Sprintf("waiting for %s to be visible", selector),
		chromedp.WaitVisible(chromedp.CSS(selector)))
}

// WaitText waits until the text (innerText) of the first element matching
// the CSS selector contains want, and returns that text. The page checks on
// each change of its DOM (a MutationObserver), not on a timer; a document
// that replaces the current one (a navigation, a reload) is checked too.
func WaitText(t testing.TB, ctx context.Context, selector, want string) string {
	t.Helper()
	args, err := json.Marshal([]string{selector, want})
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	waiter := fmt.Sprintf(`new Promise(resolve => {
  const [sel, want] = %s;
  const observer = new MutationObserver(() => check());
  const check = () => {
    const e = document.querySelector(sel);
    const text = e ? e.innerText : "";
    if (!text.includes(want)) return false;
    observer.disconnect();
    resolve(text);
    return true;
  };
  if (!check()) observer.observe(document, {childList: true, subtree: true, characterData: true, attributes: true});
})`, args)
	var text string
	wait(t, ctx, fmt.Sprintf("waiting for the text of %s to contain %q", selector, want),
		func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			for {
				// Without a context ID, Runtime.evaluate runs in the top
				// frame's current document, never in one that is gone.
				text, err = chromedp.Evaluate[string](waiter, chromedp.EvalAwaitPromise)(ctx, tg)
				if err == nil || !documentReplaced(err) || ctx.Err() != nil {
					return chromedp.Void{}, err
				}
			}
		})
	return text
}

// documentReplaced reports whether an evaluation failed because its
// document went away while it waited (a navigation or a reload), after which
// it is run again in the new one. The protocol gives these errors the
// generic code -32000, so only the browser's message tells them apart.
func documentReplaced(err error) bool {
	var pe *cdproto.Error
	return errors.As(err, &pe) &&
		(strings.Contains(pe.Message, "context was destroyed") || strings.Contains(pe.Message, "navigated or closed"))
}

// Text waits until an element matching the CSS selector is visible and
// returns its text (innerText).
func Text(t testing.TB, ctx context.Context, selector string) string {
	t.Helper()
	WaitVisible(t, ctx, selector)
	tctx, cancel := context.WithTimeout(ctx, tabOf(t, ctx).timeout)
	defer cancel()
	s, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS(selector)))
	if err != nil {
		t.Fatalf("browser: text of %s: %v\n%s", selector, err, describe(ctx))
	}
	return s
}

// Click waits until an element matching the CSS selector is visible and
// clicks its center with the mouse.
func Click(t testing.TB, ctx context.Context, selector string) {
	t.Helper()
	WaitVisible(t, ctx, selector)
	Do(t, ctx, chromedp.Click(chromedp.CSS(selector)))
}

// Screenshot writes a PNG of the whole page (beyond the window, down to the
// bottom of the document) to path, creating its directory.
func Screenshot(t testing.TB, ctx context.Context, path string) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, tabOf(t, ctx).timeout)
	defer cancel()
	png, err := chromedp.Run(tctx, chromedp.FullScreenshot(100)) // 100: PNG, not JPEG
	if err != nil {
		t.Fatalf("browser: screenshot: %v\n%s", err, describe(ctx))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatalf("browser: screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil { //nolint:gosec // a test artifact meant to be opened
		t.Fatalf("browser: screenshot: %v", err)
	}
}

// wait runs one waiting action within the tab's timeout and, when the time
// is up, fails the test saying what it waited for and what the page showed.
func wait(t testing.TB, ctx context.Context, what string, action chromedp.Action[chromedp.Void]) {
	t.Helper()
	timeout := tabOf(t, ctx).timeout
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := chromedp.Do(tctx, action)
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded):
		t.Fatalf("browser: gave up after %s %s\n%s", timeout, what, describe(ctx))
	default:
		t.Fatalf("browser: %s: %v\n%s", what, err, describe(ctx))
	}
}

// snippetLen bounds the page text in a failure message.
const snippetLen = 800

// describe tells what the tab shows, for a failure message: its URL, the
// start of its text and the problems recorded so far. It asks the page on a
// context of its own, since the caller's may be past its deadline.
func describe(ctx context.Context) string {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	type state struct {
		URL  string `json:"url"`
		Text string `json:"text"`
	}
	var b strings.Builder
	s, err := chromedp.Run(dctx, chromedp.Evaluate[state](`({url: location.href, text: document.body ? document.body.innerText : ""})`))
	if err != nil {
		fmt.Fprintf(&b, "the page did not answer: %v", err)
	} else {
		text := strings.TrimSpace(s.Text)
		if r := []rune(text); len(r) > snippetLen {
			text = string(r[:snippetLen]) + " …"
		}
		fmt.Fprintf(&b, "page %s\ntext:\n%s", s.URL, indent(text))
	}
	if tb, ok := ctx.Value(tabKey{}).(*tab); ok {
		if err := problemsError(tb.problems.list()); err != nil {
			fmt.Fprintf(&b, "\n%v", err)
		}
	}
	return b.String()
}

func indent(s string) string {
	if s == "" {
		return "  (none)"
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// call is a protocol command as a chromedp action whose result is dropped.
func call[P, R any](cmd cdp.Command[P, R], params P) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, cmd, params)
		return chromedp.Void{}, err
	}
}
