package aisdk_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/aisdktest"
	"github.com/helix-agents/helix-dbos/server/aisdk"
)

// slowDeltas are the answer of the slow agent, streamed one per 40 ms.
var slowDeltas = []string{"one ", "two ", "three ", "four ", "five ", "six ", "seven ", "eight ", "nine ", "ten."}

// env is an engine with the chat handler on a test server, running the
// agents of package aisdktest: weather (the default: a server tool), asker
// (a client-executed tool), lead (a sub-agent with a client tool), slow
// (paced text) and banker (an approval-gated tool). The principal is the
// aisdktest.HeaderUser header; a request without one is unauthenticated.
type env struct {
	t   *testing.T
	eng *engine.Engine
	url string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	eng, srv := aisdktest.NewServer(t, aisdktest.WeatherAgent(), aisdktest.AskerAgent(), aisdktest.LeadAgent(),
		aisdktest.SlowAgent(slowDeltas, 40*time.Millisecond), aisdktest.BankerAgent(nil))
	return &env{t: t, eng: eng, url: srv.URL}
}

// reply is a response; the test's cleanup closes its body.
type reply struct{ *http.Response }

func (e *env) do(method, path, user string, body any, header http.Header) reply {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(e.t, err)
		rd = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(e.t.Context(), 30*time.Second)
	e.t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, method, e.url+path, rd)
	require.NoError(e.t, err)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json") // header may replace it
	}
	maps.Copy(req.Header, header)
	if user != "" {
		req.Header.Set(aisdktest.HeaderUser, user)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = resp.Body.Close() })
	return reply{resp}
}

// chat posts a useChat request.
func (e *env) chat(user, id string, msgs ...aisdk.UIMessage) reply {
	e.t.Helper()
	return e.do(http.MethodPost, "/chat", user, aisdk.ChatRequest{ID: id, Messages: msgs, Trigger: aisdk.TriggerSubmitMessage}, nil)
}

func userMsg(id, text string) aisdk.UIMessage {
	return aisdk.UIMessage{ID: id, Role: "user", Parts: []aisdk.UIPart{{Type: "text", Text: text}}}
}

// event is one SSE event of a response: its chunk (nil for [DONE]) and id.
type event struct {
	id    int64
	chunk map[string]any
	done  bool
}

// sse reads a response's events as they arrive.
type sse struct {
	t  *testing.T
	br *bufio.Reader
}

func newSSE(t *testing.T, resp reply) *sse {
	t.Helper()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", peek(resp))
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	require.Equal(t, "v1", resp.Header.Get(aisdk.HeaderUIMessageStream))
	return &sse{t: t, br: bufio.NewReader(resp.Body)}
}

func peek(resp reply) string {
	if resp.StatusCode == http.StatusOK {
		return ""
	}
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// next returns the next event, or false at the end of the body.
func (s *sse) next() (event, bool) {
	s.t.Helper()
	var ev event
	for {
		line, err := s.br.ReadString('\n')
		if errors.Is(err, io.EOF) && line == "" {
			return ev, false
		}
		require.NoError(s.t, err)
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if ev.chunk != nil || ev.done {
				return ev, true
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			n, err := strconv.ParseInt(line[4:], 10, 64)
			require.NoError(s.t, err)
			ev.id = n
		case line == "data: [DONE]":
			ev.done = true
		case strings.HasPrefix(line, "data: "):
			require.NoError(s.t, json.Unmarshal([]byte(line[6:]), &ev.chunk), line)
		default:
			s.t.Fatalf("unexpected SSE line %q", line)
		}
	}
}

// all reads the rest of the response; it must end with [DONE].
func (s *sse) all() []event {
	s.t.Helper()
	var out []event
	for {
		ev, ok := s.next()
		if !ok {
			require.NotEmpty(s.t, out)
			require.True(s.t, out[len(out)-1].done, "the stream ends with [DONE]")
			return out[:len(out)-1]
		}
		out = append(out, ev)
	}
}

func readAll(t *testing.T, resp reply) []event { return newSSE(t, resp).all() }

func types(evs []event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.chunk["type"].(string)
	}
	return out
}

func find(evs []event, typ string) []map[string]any {
	var out []map[string]any
	for _, e := range evs {
		if e.chunk["type"] == typ {
			out = append(out, e.chunk)
		}
	}
	return out
}

// text concatenates the response's text deltas.
func text(evs []event) string {
	var b strings.Builder
	for _, c := range find(evs, "text-delta") {
		b.WriteString(c["delta"].(string))
	}
	return b.String()
}

// finish returns the finish chunk (the last event) and its helix metadata.
func finish(t *testing.T, evs []event) (reason string, meta map[string]any) {
	t.Helper()
	last := evs[len(evs)-1].chunk
	require.Equal(t, "finish", last["type"])
	r, _ := last["finishReason"].(string)
	return r, last["messageMetadata"].(map[string]any)["helix"].(map[string]any)
}

// assistant is the assistant message a client holds after a response, for
// a continuation request: its tool parts (with the given answers applied)
// and the finish metadata.
func assistant(t *testing.T, evs []event, parts ...aisdk.UIPart) aisdk.UIMessage {
	t.Helper()
	start := evs[0].chunk
	require.Equal(t, "start", start["type"])
	_, meta := finish(t, evs)
	md, err := json.Marshal(map[string]any{"helix": meta})
	require.NoError(t, err)
	return aisdk.UIMessage{ID: start["messageId"].(string), Role: "assistant", Metadata: md, Parts: parts}
}

// apiErr decodes an error response.
func apiErr(t *testing.T, resp reply, status int) (code string, body map[string]any) {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, status, resp.StatusCode, "%s", b)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var v struct {
		Error map[string]any `json:"error"`
	}
	require.NoError(t, json.Unmarshal(b, &v), "%s", b)
	require.NotEmpty(t, v.Error["message"])
	return v.Error["code"].(string), v.Error
}
