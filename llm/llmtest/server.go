package llmtest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// Fixture is one recorded HTTP response the fake [Server] replays.
type Fixture struct {
	// Status is the HTTP status. Default 200.
	Status int
	// Header holds extra response headers (Retry-After, request IDs, …).
	// Content-Type defaults to text/event-stream for a 200 and to
	// application/json otherwise.
	Header map[string]string
	// File is the path of the body, relative to the test's working
	// directory (the adapter package's directory under go test), e.g.
	// "testdata/text.sse". Body is used when File is empty.
	File string
	// Body is the response body, when File is empty.
	Body string
	// Abort drops the connection after the body instead of ending the
	// response: the client sees the body cut mid-way (an unexpected EOF),
	// as when a proxy or the provider crashes.
	Abort bool
	// Hang keeps the response open after the body until the client goes
	// away, as a stalled provider does.
	Hang bool
}

// RecordedRequest is one request the fake server received.
type RecordedRequest struct {
	Method string
	// Path is the URL path, RawQuery the query string.
	Path     string
	RawQuery string
	Header   http.Header
	Body     []byte
	// At is when the request arrived.
	At time.Time
}

// holdTimeout bounds how long the server holds back the end of a stream
// waiting for the adapter to forward a delta.
const holdTimeout = 5 * time.Second

// Server is a fake provider: an httptest server that answers the n-th
// request with the n-th fixture (the last fixture again once they run out)
// and records every request. Event-stream bodies are written event by
// event (split at blank lines), flushed after each, so the client reads
// them as a real stream.
type Server struct {
	// URL is the server's base URL, like http://127.0.0.1:port.
	URL string

	srv      *httptest.Server
	done     chan struct{}
	mu       sync.Mutex
	fixtures []Fixture
	bodies   [][]byte
	requests []RecordedRequest
	hold     <-chan struct{}
	held     bool // a hold timed out: nothing was forwarded before the end
}

// NewServer starts a fake server replaying fixtures (at least one). It is
// closed when the test ends. A fixture file that cannot be read fails the
// test.
func NewServer(t testing.TB, fixtures ...Fixture) *Server {
	t.Helper()
	if len(fixtures) == 0 {
		t.Fatal("llmtest: NewServer needs at least one fixture")
	}
	s := &Server{done: make(chan struct{}), fixtures: fixtures}
	for _, f := range fixtures {
		body := []byte(f.Body)
		if f.File != "" {
			b, err := os.ReadFile(f.File)
			if err != nil {
				t.Fatalf("llmtest: read fixture: %v", err)
			}
			body = b
		}
		s.bodies = append(s.bodies, body)
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	t.Cleanup(func() {
		close(s.done) // releases hanging handlers, so Close does not wait for them
		s.srv.Close()
	})
	return s
}

// Client returns an HTTP client for the server. Closing the server closes
// its idle connections, so a test using it leaks no goroutine.
func (s *Server) Client() *http.Client { return s.srv.Client() }

// HoldLastEvent makes the server hold back the last event of the last
// fixture's event-stream body (the answer that follows any failed
// attempts) until ch is closed (at most 5s). Pass
// [Recorder.First]: an adapter that buffers deltas until the end of the
// stream never forwards anything before the end, and [Server.HoldTimedOut]
// reports it.
func (s *Server) HoldLastEvent(ch <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = ch
}

// HoldTimedOut reports whether a held-back event had to be released after
// the timeout because nothing was forwarded before it.
func (s *Server) HoldTimedOut() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// Requests returns the requests received so far, in order.
func (s *Server) Requests() []RecordedRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]RecordedRequest(nil), s.requests...)
}

// RequestBody returns the members of the JSON object body of the n-th
// request received (0 for the first), for checking what an adapter put on
// the wire. It fails the test at once when there is no such request or its
// body is not a JSON object.
func (s *Server) RequestBody(t testing.TB, n int) map[string]json.RawMessage {
	t.Helper()
	reqs := s.Requests()
	if n >= len(reqs) {
		t.Fatalf("llmtest: request %d wanted, the server received %d", n, len(reqs))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(reqs[n].Body, &m); err != nil || m == nil {
		t.Fatalf("llmtest: request %d: the body is not a JSON object (%v): %s", n, err, reqs[n].Body)
	}
	return m
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	i := min(len(s.requests), len(s.fixtures)-1)
	s.requests = append(s.requests, RecordedRequest{
		Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
		Header: r.Header.Clone(), Body: body, At: time.Now(),
	})
	f, data, hold := s.fixtures[i], s.bodies[i], s.hold
	if i != len(s.fixtures)-1 {
		hold = nil
	}
	s.mu.Unlock()

	status := f.Status
	if status == 0 {
		status = http.StatusOK
	}
	ct := "application/json"
	if status == http.StatusOK {
		ct = "text/event-stream; charset=utf-8"
	}
	w.Header().Set("Content-Type", ct)
	for k, v := range f.Header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(status)
	flusher, _ := w.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	flush() // headers go out at once, even for an empty, hanging body

	if strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		events := splitEvents(data)
		last := len(events) - 1
		for last >= 0 && len(bytes.TrimSpace(events[last])) == 0 {
			last--
		}
		for j, ev := range events {
			if j == last && hold != nil {
				s.waitHold(r, hold)
			}
			if _, err := w.Write(ev); err != nil {
				return
			}
			flush()
		}
	} else if _, err := w.Write(data); err != nil {
		return
	}
	flush()

	switch {
	case f.Abort:
		// The server closes the connection without the final chunk.
		panic(http.ErrAbortHandler)
	case f.Hang:
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
	}
}

func (s *Server) waitHold(r *http.Request, hold <-chan struct{}) {
	t := time.NewTimer(holdTimeout)
	defer t.Stop()
	select {
	case <-hold:
	case <-r.Context().Done():
	case <-s.done:
	case <-t.C:
		s.mu.Lock()
		s.held = true
		s.mu.Unlock()
	}
}

// splitEvents splits an event-stream body after each blank line, keeping
// the separators, so that writing the pieces in order writes the body.
func splitEvents(body []byte) [][]byte {
	var out [][]byte
	for len(body) > 0 {
		i := bytes.Index(body, []byte("\n\n"))
		if i < 0 {
			out = append(out, body)
			break
		}
		out = append(out, body[:i+2])
		body = body[i+2:]
	}
	return out
}
