package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// providerCall is one request the fake provider received.
type providerCall struct {
	at       time.Time
	session  string
	rejected bool // answered 429
}

// fakeProvider is an OpenAI-compatible Chat Completions server that
// answers "ok" after a fixed latency, with an optional rate limit over a
// sliding window.
type fakeProvider struct {
	url     string
	latency time.Duration
	limit   int
	period  time.Duration
	srv     *http.Server
	served  chan struct{}

	mu       sync.Mutex
	calls    []providerCall
	accepted []time.Time // accepted calls of the last period, oldest first
}

// startFakeProvider listens on 127.0.0.1 and serves.
func startFakeProvider(latency time.Duration, limit int, period time.Duration) (*fakeProvider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the fake model provider: %w", err)
	}
	p := &fakeProvider{url: "http://" + ln.Addr().String(), latency: latency, limit: limit, period: period, served: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", p.complete)
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(p.served)
		_ = p.srv.Serve(ln)
	}()
	return p, nil
}

// close stops the server; requests still waiting end with ctx.
func (p *fakeProvider) close(ctx context.Context) {
	if err := p.srv.Shutdown(ctx); err != nil {
		_ = p.srv.Close()
	}
	<-p.served
}

// chatRequest is the part of a Chat Completions request the fake provider
// reads.
type chatRequest struct {
	Messages []struct {
		Role    string  `json:"role"`
		Content *string `json:"content"`
	} `json:"messages"`
}

// complete answers a Chat Completions request.
func (p *fakeProvider) complete(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<20)).Decode(&req); err != nil {
		writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", "the body is not a Chat Completions request: "+err.Error())
		return
	}
	session := ""
	for _, m := range slices.Backward(req.Messages) {
		if m.Role == "user" && m.Content != nil {
			session = strings.TrimPrefix(*m.Content, "load ")
			break
		}
	}
	if wait, ok := p.admit(time.Now(), session); !ok {
		w.Header().Set("retry-after-ms", strconv.FormatInt(max(wait.Milliseconds(), 1), 10))
		writeOpenAIError(w, http.StatusTooManyRequests, "requests", "rate_limit_exceeded",
			fmt.Sprintf("Rate limit reached for %s: limit %d per %s. Please try again in %s.", loadtestModel, p.limit, p.period, wait.Round(time.Millisecond)))
		return
	}
	t := time.NewTimer(p.latency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return
	}
	writeCompletion(w)
}

// admit records a call and decides whether the rate limit lets it
// through; when not, it returns how long until a call would be.
func (p *fakeProvider) admit(now time.Time, session string) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	call := providerCall{at: now, session: session}
	defer func() { p.calls = append(p.calls, call) }()
	if p.limit == 0 {
		return 0, true
	}
	cut := 0
	for cut < len(p.accepted) && now.Sub(p.accepted[cut]) >= p.period {
		cut++
	}
	p.accepted = p.accepted[cut:]
	if len(p.accepted) >= p.limit {
		call.rejected = true
		return p.accepted[0].Add(p.period).Sub(now), false
	}
	p.accepted = append(p.accepted, now)
	return 0, true
}

// snapshot returns the calls received so far.
func (p *fakeProvider) snapshot() []providerCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// writeOpenAIError writes an error in OpenAI's form.
func writeOpenAIError(w http.ResponseWriter, status int, typ, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
}

// completionCounter numbers the fake completions.
var completionCounter atomic.Int64

// writeCompletion streams the answer "ok" as Chat Completions chunks: the
// role, the content, the finish reason, the usage, then [DONE].
func writeCompletion(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	head := fmt.Sprintf(`{"id":"chatcmpl-load%d","object":"chat.completion.chunk","created":%d,"model":"%s",`,
		completionCounter.Add(1), time.Now().Unix(), loadtestModel)
	for _, rest := range []string{
		`"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}`,
		`"choices":[{"index":0,"delta":{"content":"ok"},"logprobs":null,"finish_reason":null}],"usage":null}`,
		`"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}`,
		`"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":1,"total_tokens":13}}`,
	} {
		fmt.Fprintf(w, "data: %s%s\n\n", head, rest)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}
