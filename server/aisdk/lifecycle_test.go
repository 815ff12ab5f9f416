package aisdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/aisdktest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
	"github.com/helix-agents/helix-dbos/server/aisdk"
	"github.com/helix-agents/helix-dbos/server/internal/redact"
)

// Handler.Shutdown ends open chat streams at once, without the finish
// chunk (the run is not over), and refuses new requests; the run goes on
// in the engine, and the client reconnects through another handler from
// the last sequence it has, losing nothing.
func TestHandlerShutdownEndsStreams(t *testing.T) {
	t.Parallel()
	gate, open := aisdktest.NewGate(t)
	agent := aisdktest.GatedAgent(gate)
	eng, h := aisdktest.NewHandler(t, nil, agent)
	e := &env{t: t, eng: eng, url: aisdktest.Serve(t, h).URL}

	s := newSSE(t, e.chat("alice", "chat-sd", userMsg("u1", "go")))
	var seen []event
	for len(find(seen, "text-delta")) == 0 { // the run now waits behind the gate
		ev, ok := s.next()
		require.True(t, ok)
		seen = append(seen, ev)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, h.Shutdown(ctx), "the open stream does not hold Shutdown")
	require.NoError(t, h.Shutdown(ctx), "idempotent")
	for {
		ev, ok := s.next()
		if !ok {
			break
		}
		require.NotEqual(t, "finish", ev.chunk["type"], "no finish: the run is not over")
		require.False(t, ev.done)
		seen = append(seen, ev)
	}
	resp := e.do(http.MethodGet, "/chat/chat-sd/stream", "alice", nil, nil)
	code, _ := apiErr(t, resp, http.StatusServiceUnavailable)
	require.Equal(t, "shutting_down", code)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))

	open()
	hd, err := eng.Run(t.Context(), "chat-sd", seen[0].chunk["messageId"].(string))
	require.NoError(t, err)
	res, err := hd.Await(t.Context())
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, res.Status, "the shutdown left the run alone")

	other, err := aisdk.NewHandler(eng, aisdk.Options{Agents: []*helix.Agent{agent}, Authenticate: aisdktest.Authenticate})
	require.NoError(t, err)
	e.url = aisdktest.Serve(t, other).URL
	var last int64
	for _, ev := range seen {
		last = max(last, ev.id)
	}
	rest := readAll(t, e.do(http.MethodGet, "/chat/chat-sd/stream", "alice", nil,
		http.Header{aisdk.HeaderResumeFromSequence: {strconv.FormatInt(last, 10)}}))
	require.Equal(t, "working done", text(seen)+text(rest), "every delta once")
	reason, meta := finish(t, rest)
	require.Equal(t, "stop", reason)
	require.Equal(t, "completed", meta["status"])
}

// A client that stops reading does not pin its chat stream: the write
// that cannot complete within WriteTimeout ends the response, and the
// handler returns.
func TestChatWriteTimeout(t *testing.T) {
	t.Parallel()
	big := make([]string, 512) // 2 MiB: far more than the socket buffers of a client that stopped reading
	for i := range big {
		big[i] = strings.Repeat("x", 4<<10)
	}
	agent := &helix.Agent{Name: "big", Model: scripted.New(scripted.Step{Deltas: big})}
	eng, h := aisdktest.NewHandler(t, func(o *aisdk.Options) { o.WriteTimeout = 300 * time.Millisecond }, agent)
	hd, err := eng.Execute(t.Context(), agent, engine.Input{Message: "hi"}, &engine.ExecuteOptions{SessionID: "big-chat", UserID: "alice"})
	require.NoError(t, err)
	_, err = hd.Await(t.Context())
	require.NoError(t, err)

	returned := make(chan struct{})
	var once sync.Once
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer once.Do(func() { close(returned) })
		h.ServeHTTP(w, r)
	}))
	ts.Listener = smallBufferListener{ts.Listener}
	ts.Start()
	t.Cleanup(ts.Close)

	u, err := url.Parse(ts.URL)
	require.NoError(t, err)
	conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(4<<10))
	_, err = fmt.Fprintf(conn, "GET /chat/big-chat/stream HTTP/1.1\r\nHost: %s\r\n%s: alice\r\n%s: 0\r\n\r\n", u.Host, aisdktest.HeaderUser, aisdk.HeaderResumeFromSequence)
	require.NoError(t, err)

	select { // the client reads nothing meanwhile
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("the stalled chat stream's handler did not return")
	}
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	got, _ := io.ReadAll(conn) // ends with EOF or a reset: the server closed the connection
	require.Contains(t, string(got), "text/event-stream")
	require.NotContains(t, string(got), `"type":"finish"`)
}

type smallBufferListener struct{ net.Listener }

// Accept gives each connection a small kernel send buffer, so that a
// client that stops reading blocks the server's writes after a few
// kilobytes.
func (l smallBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}

// An internal failure's text (the engine's own error, possibly SQL) never
// reaches the chat, not even through an ErrorText that passes the error's
// message on.
func TestChatRedactsInternalFailure(t *testing.T) {
	t.Parallel()
	const secret = "SELECT password FROM vault"
	agent := &helix.Agent{Name: "broken", Model: scripted.New(scripted.Step{Text: "never"}),
		SystemPromptFunc: func(context.Context, json.RawMessage) (string, error) { return "", errors.New(secret) }}
	eng, h := aisdktest.NewHandler(t, func(o *aisdk.Options) {
		o.ErrorText = func(c *helix.ErrorChunk) string {
			if c.ErrorDetail != nil {
				return c.Error + " / " + c.ErrorDetail.Message + c.ErrorDetail.Cause
			}
			return c.Error
		}
	}, agent)
	e := &env{t: t, eng: eng, url: aisdktest.Serve(t, h).URL}
	resp := e.chat("alice", "broken-chat", userMsg("u1", "hi"))
	s := newSSE(t, resp)
	evs := s.all()
	errs := find(evs, "error")
	require.Len(t, errs, 1)
	require.True(t, strings.HasPrefix(errs[0]["errorText"].(string), redact.RunFailure), errs[0]["errorText"])
	for _, ev := range evs {
		require.NotContains(t, fmt.Sprint(ev.chunk), "vault")
	}
	reason, _ := finish(t, evs)
	require.Equal(t, "error", reason)
}
