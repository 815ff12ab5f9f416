package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// ProblemKind says what a [Problem] is.
type ProblemKind string

// The kinds of problems a tab records.
const (
	// Exception is an uncaught JavaScript exception or an unhandled promise
	// rejection.
	Exception ProblemKind = "exception"
	// ConsoleError is a console.error call, or a console.assert that failed.
	ConsoleError ProblemKind = "console-error"
	// CSPViolation is something a Content-Security-Policy blocked, such as an
	// inline script under script-src 'self' (which then did not run).
	CSPViolation ProblemKind = "csp-violation"
	// BrowserError is another error-level entry of the browser's log, other
	// than a failed HTTP request.
	BrowserError ProblemKind = "browser-error"
)

// Problem is an error a page's user would see in the DevTools console.
type Problem struct {
	Kind ProblemKind
	// Text is the message: the exception with its stack, the console call's
	// arguments, the browser's text (a CSP violation names the directive).
	Text string
	// URL and Line (1-based; 0 when unknown) say where, when the browser
	// tells.
	URL  string
	Line int64
}

// String returns the kind, the place and the text.
func (p Problem) String() string {
	where := p.URL
	if p.Line > 0 {
		where = fmt.Sprintf("%s:%d", p.URL, p.Line)
	}
	if where == "" {
		return fmt.Sprintf("%s: %s", p.Kind, p.Text)
	}
	return fmt.Sprintf("%s at %s: %s", p.Kind, where, p.Text)
}

// recorder collects a tab's problems. Its listen runs in chromedp's loop
// that reads the tab's messages, in their order, before the reply to a
// command that came after them reaches the caller: a problem the browser
// reported before a command's reply is recorded when the command returns.
type recorder struct {
	mu       sync.Mutex
	problems []Problem
}

func (r *recorder) listen(ev any) {
	var p Problem
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		p = Problem{Kind: Exception, Text: d.Text, URL: d.URL, Line: d.LineNumber + 1}
		if d.Exception != nil && d.Exception.Description != "" {
			p.Text += " " + d.Exception.Description
		}
	case *runtime.EventConsoleAPICalled:
		if ev.Type != runtime.ConsoleAPICalledTypeError && ev.Type != runtime.ConsoleAPICalledTypeAssert {
			return
		}
		p = Problem{Kind: ConsoleError, Text: argsText(ev.Args)}
		if ev.StackTrace != nil && len(ev.StackTrace.CallFrames) > 0 {
			f := ev.StackTrace.CallFrames[0]
			p.URL, p.Line = f.URL, f.LineNumber+1
		}
	case *log.EventEntryAdded:
		e := ev.Entry
		if e.Level != log.EntryLevelError || e.Source == log.EntrySourceNetwork {
			return
		}
		p = Problem{Kind: BrowserError, Text: e.Text, URL: e.URL, Line: e.LineNumber + 1}
		if e.Source == log.EntrySourceSecurity && strings.Contains(e.Text, "Content Security Policy") {
			p.Kind = CSPViolation
		}
	default:
		return
	}
	if p.URL == "" {
		p.Line = 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problems = append(r.problems, p)
}

func (r *recorder) list() []Problem {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Problem(nil), r.problems...)
}

// argsText joins a console call's arguments as the console shows them,
// roughly: strings as they are, other values by their description.
func argsText(args []*runtime.RemoteObject) string {
	parts := make([]string, 0, len(args))
	for _, a := range args {
		var s string
		switch {
		case a.Type == runtime.RemoteObjectTypeString && json.Unmarshal(a.Value, &s) == nil:
		case a.Description != "":
			s = a.Description
		case len(a.Value) > 0:
			s = string(a.Value)
		default:
			s = string(a.UnserializableValue)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// Problems returns the problems the tab recorded so far, in order. It first
// makes one round trip to the page, so everything the browser reported
// before the call is in the list. A problem that comes later (a timer's
// exception, a reply still in flight) is not: wait for the page's state
// first (WaitText, WaitVisible).
func Problems(t testing.TB, ctx context.Context) []Problem {
	t.Helper()
	tb := tabOf(t, ctx)
	Do(t, ctx, chromedp.Evaluate[chromedp.Void]("0"))
	return tb.problems.list()
}

// RequireNoProblems fails the test, listing them, if the tab recorded any
// problem so far (see [Problems]).
func RequireNoProblems(t testing.TB, ctx context.Context) {
	t.Helper()
	if err := problemsError(Problems(t, ctx)); err != nil {
		t.Fatal(err)
	}
}

func problemsError(ps []Problem) error {
	if len(ps) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "browser: the page had %d problem(s):", len(ps))
	for _, p := range ps {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return errors.New(b.String())
}
