package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/scripted"
	"github.com/helix-agents/helix-dbos/server"
)

// storedSequences returns the sequences of a session's current run, from
// its start to the stream_end, as stored.
func storedSequences(t *testing.T, h *harness, sessionID string) []int64 {
	t.Helper()
	runs, err := h.eng.Runs(t.Context(), sessionID)
	require.NoError(t, err)
	chunks, err := h.eng.StreamChunks(t.Context(), sessionID, runs[len(runs)-1].StartSequence, 500)
	require.NoError(t, err)
	var seqs []int64
	for _, c := range chunks {
		seqs = append(seqs, c.Sequence)
	}
	require.Equal(t, helix.ChunkStreamEnd, chunks[len(chunks)-1].Chunk.ChunkType())
	return seqs
}

func ids(events []sseEvent) []int64 {
	out := make([]int64, 0, len(events))
	for _, ev := range events {
		out = append(out, ev.id)
	}
	return out
}

// A client reads part of a live stream from one instance, loses the
// connection, and resumes on a second instance (another engine on the
// same database) with Last-Event-ID or X-Resume-From-Sequence: it gets
// every chunk exactly once, in order, through the end. Meanwhile the run's
// tool call is approved through the second instance.
func TestSSEResumeOnSecondInstance(t *testing.T) {
	t.Parallel()
	for _, header := range []string{server.HeaderLastEventID, server.HeaderResumeFromSequence} {
		t.Run(header, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			a := newHarness(t, "", "exec-a", server.Config{Agents: []*helix.Agent{approverAgent(&runs)}})
			b := newHarness(t, a.db, "exec-b", server.Config{Agents: []*helix.Agent{approverAgent(&runs)}})

			res := a.do(http.MethodPost, "/start", "alice", map[string]any{"agentType": "approver", "message": "pay bob"})
			require.Equal(t, http.StatusAccepted, res.status, "body: %s", res.raw)
			id := res.body["sessionId"].(string)
			query := strings.TrimPrefix(res.body["streamUrl"].(string), "/sse?")

			first := openSSE(t, a.ts.URL, query, "alice")
			seen := first.until(func(ev sseEvent) bool { return ev.chunkType() == string(helix.ChunkToolApprovalRequest) })
			require.Greater(t, len(seen), 3)
			seen = seen[:3] // the client lost the rest
			first.close()

			res = b.do(http.MethodPost, "/submit-tool-result", "alice", map[string]any{"sessionId": id, "kind": "approval-response", "toolCallId": "t1", "approved": true})
			require.Equal(t, http.StatusOK, res.status, "body: %s", res.raw)

			last := strconv.FormatInt(seen[len(seen)-1].id, 10)
			second := openSSE(t, b.ts.URL, query, "alice", header, last)
			events := second.until(isEnd)
			require.Equal(t, "end", events[len(events)-1].typ())

			all := slices.Concat(seen, events)
			require.Equal(t, storedSequences(t, b, id), ids(all), "every chunk once, in order, through the stream_end")
			for _, ev := range all[:len(all)-1] {
				require.Equal(t, "chunk", ev.typ())
				require.EqualValues(t, ev.id, ev.data["sequence"])
			}
			require.EqualValues(t, 1, runs.Load())

			// The end is final: a reconnect after it (what EventSource
			// does when the response ends) gets 204, which stops it.
			res = b.do(http.MethodGet, "/sse?"+query, "alice", nil, header, strconv.FormatInt(events[len(events)-1].id, 10))
			require.Equal(t, http.StatusNoContent, res.status, "body: %s", res.raw)
			require.Empty(t, res.raw)
		})
	}
}

// X-Resume-From-Sequence wins over Last-Event-ID, which wins over
// ?fromSequence=; invalid positions are refused.
func TestSSEResumePosition(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{echoAgent()}})
	id, _ := h.start("alice", map[string]any{"agentType": "echo", "message": "hi"})
	full := openSSE(t, h.ts.URL, "sessionId="+id, "alice").until(isEnd)
	require.Greater(t, len(full), 4)
	seq := func(i int) string { return strconv.FormatInt(full[i].id, 10) }

	got := openSSE(t, h.ts.URL, "sessionId="+id+"&fromSequence="+seq(0), "alice",
		server.HeaderLastEventID, seq(1), server.HeaderResumeFromSequence, seq(2)).until(isEnd)
	require.Equal(t, ids(full[3:]), ids(got))
	got = openSSE(t, h.ts.URL, "sessionId="+id+"&fromSequence="+seq(0), "alice", server.HeaderLastEventID, seq(1)).until(isEnd)
	require.Equal(t, ids(full[2:]), ids(got))
	got = openSSE(t, h.ts.URL, "sessionId="+id+"&fromSequence="+seq(0), "alice").until(isEnd)
	require.Equal(t, ids(full[1:]), ids(got))

	for _, c := range []struct{ query, header, value, message string }{
		{"", server.HeaderLastEventID, "abc", "Last-Event-ID must be a non-negative integer"},
		{"", server.HeaderResumeFromSequence, "-1", "X-Resume-From-Sequence must be a non-negative integer"},
		{"&fromSequence=1.5", "", "", "fromSequence must be a non-negative integer"},
		{"", server.HeaderLastEventID, "999999", "past the stream's last event"},
	} {
		var headers []string
		if c.header != "" {
			headers = []string{c.header, c.value}
		}
		res := h.do(http.MethodGet, "/sse?sessionId="+id+c.query, "alice", nil, headers...)
		require.Equal(t, http.StatusBadRequest, res.status, "body: %s", res.raw)
		require.Equal(t, "invalid_resume_position", res.errCode())
		require.Contains(t, res.errMessage(), c.message)
	}
}

// The SSE response carries the streaming headers, sends heartbeats while
// the run waits, and releases its reader when the client disconnects.
func TestSSEHeartbeatAndDisconnect(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{approverAgent(&runs)}, HeartbeatInterval: 20 * time.Millisecond})
	id, _ := h.start("alice", map[string]any{"agentType": "approver", "message": "pay"})
	st := openSSE(t, h.ts.URL, "sessionId="+id, "alice")
	require.Equal(t, "text/event-stream", st.resp.Header.Get("Content-Type"))
	require.Equal(t, "no-cache", st.resp.Header.Get("Cache-Control"))
	require.Equal(t, "no", st.resp.Header.Get("X-Accel-Buffering"))
	st.until(func(ev sseEvent) bool { return ev.chunkType() == string(helix.ChunkToolApprovalRequest) })
	for {
		ev, ok := st.next()
		require.True(t, ok)
		if ev.comment == "ping" {
			break
		}
	}
	h.requireMetric("helix_sse_connections", 1.0)
	st.close()
	eventually(t, "the SSE handler to return", func() bool { return h.metricValue("helix_sse_connections") == 0 })
}

// Aborting a session ends its stream with the fail event.
func TestSSEFailEvent(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{approverAgent(&runs)}})
	id, _ := h.start("alice", map[string]any{"agentType": "approver", "message": "pay"})
	st := openSSE(t, h.ts.URL, "sessionId="+id, "alice")
	st.until(func(ev sseEvent) bool { return ev.chunkType() == string(helix.ChunkToolApprovalRequest) })
	res := h.do(http.MethodPost, "/abort", "alice", map[string]any{"sessionId": id, "reason": "no"})
	require.Equal(t, http.StatusOK, res.status, "body: %s", res.raw)
	events := st.until(isEnd)
	fail := events[len(events)-1]
	require.Equal(t, "fail", fail.typ())
	require.EqualValues(t, -1, fail.id)
	require.Contains(t, fail.data["error"], "no")
	var types []string
	for _, ev := range events {
		types = append(types, ev.chunkType())
	}
	require.Contains(t, types, string(helix.ChunkToolEnd))
	require.Contains(t, types, string(helix.ChunkError))
}

// Shutdown ends open SSE responses cleanly (no end event) and leaves the
// session alone: it completes, and the client resumes on another instance
// without losing or repeating a chunk.
func TestShutdownEndsSSE(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	a := newHarness(t, "", "exec-a", server.Config{Agents: []*helix.Agent{approverAgent(&runs)}})
	b := newHarness(t, a.db, "exec-b", server.Config{Agents: []*helix.Agent{approverAgent(&runs)}})
	id, _ := a.start("alice", map[string]any{"agentType": "approver", "message": "pay"})
	st := openSSE(t, a.ts.URL, "sessionId="+id, "alice")
	seen := st.until(func(ev sseEvent) bool { return ev.chunkType() == string(helix.ChunkToolApprovalRequest) })

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, a.srv.Shutdown(ctx))
	rest, comments := st.rest()
	require.Empty(t, rest, "no end event: the stream did not end")
	require.Contains(t, comments, "server shutting down: reconnect with Last-Event-ID")

	res := b.do(http.MethodPost, "/submit-tool-result", "alice", map[string]any{"sessionId": id, "kind": "approval-response", "toolCallId": "t1", "approved": true})
	require.Equal(t, http.StatusOK, res.status, "body: %s", res.raw)
	b.waitStatus("alice", id, "completed")
	events := openSSE(t, b.ts.URL, "sessionId="+id, "alice", server.HeaderLastEventID, strconv.FormatInt(seen[len(seen)-1].id, 10)).until(isEnd)
	require.Equal(t, storedSequences(t, b, id), ids(slices.Concat(seen, events)))
}

// G4: a retry removes chunks after the position of a client that has not
// read them yet. The client gets the truncated event (no id), then the
// surviving chunks — the retry's stream_resync first — through the end,
// on the same response.
func TestSSETruncation(t *testing.T) {
	t.Parallel()
	// The first model call streams 520 deltas of 16 KiB (8 MiB): more
	// than the sockets buffer, so the SSE handler is still writing the
	// reader's first page (500 chunks) when the retry removes the rest.
	var calls atomic.Int32
	big := make([]string, 520)
	for i := range big {
		big[i] = strings.Repeat("x", 16<<10)
	}
	model := scripted.Generate(func(int, helix.ModelRequest) (scripted.Step, error) {
		if calls.Add(1) == 1 {
			return scripted.Step{Deltas: big, ToolCalls: []scripted.Call{{ID: "t1", Name: "transfer", Args: map[string]any{"to": "bob", "amount": 1}}}}, nil
		}
		return scripted.Step{Text: "retried"}, nil
	})
	var runs atomic.Int32
	agent := approverAgent(&runs)
	agent.Model = model
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{agent}})
	id, _ := h.start("alice", map[string]any{"agentType": "approver", "message": "pay"})
	h.waitStatus("alice", id, "suspended_client_tool")
	require.Equal(t, http.StatusAccepted, h.do(http.MethodPost, "/interrupt", "alice", map[string]any{"sessionId": id}).status)
	h.waitStatus("alice", id, "interrupted")

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.ts.URL+"/sse?sessionId="+id, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer alice")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
	readEvent := func() sseEvent {
		ev := sseEvent{id: -1}
		for {
			line, err := rd.ReadString('\n')
			require.NoError(t, err)
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "" && ev.raw != "":
				require.NoError(t, json.Unmarshal([]byte(ev.raw), &ev.data))
				return ev
			case strings.HasPrefix(line, "id: "):
				ev.id, err = strconv.ParseInt(line[4:], 10, 64)
				require.NoError(t, err)
			case strings.HasPrefix(line, "data: "):
				ev.raw += line[6:]
			}
		}
	}
	first := readEvent()
	require.Equal(t, "chunk", first.typ())

	_, err = h.eng.Retry(t.Context(), id, nil)
	require.NoError(t, err)

	last := first.id
	var truncated *sseEvent
	var after []sseEvent
	for {
		ev := readEvent()
		if ev.typ() == "truncated" {
			require.Nil(t, truncated, "one truncated event")
			require.EqualValues(t, -1, ev.id, "the truncated event has no id")
			truncated = &ev
			continue
		}
		require.Greater(t, ev.id, last, "no duplicates, in order")
		last = ev.id
		if truncated != nil {
			after = append(after, ev)
		}
		if isEnd(ev) {
			break
		}
	}
	require.NotNil(t, truncated, "the client was told")
	require.Contains(t, truncated.data, "truncatedAtStep")
	require.NotEmpty(t, after)
	require.Equal(t, string(helix.ChunkStreamResync), after[0].chunkType(), "the surviving chunks start with the retry's resync")
	require.Equal(t, helix.ResyncRetry, after[0].data["chunk"].(map[string]any)["reason"])
	require.Equal(t, "end", after[len(after)-1].typ())
}

// A client positioned at the end of a finished stream (EventSource
// reconnecting after the end or fail event with its last id) gets 204 No
// Content, which stops EventSource from reconnecting; one positioned
// before the end still gets the rest and the end.
func TestSSEFinishedStreamAnswers204(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{echoAgent(), approverAgent(&runs)}})

	done, _ := h.start("alice", map[string]any{"agentType": "echo", "message": "hi"})
	full := openSSE(t, h.ts.URL, "sessionId="+done, "alice").until(isEnd)
	end := full[len(full)-1]
	require.Equal(t, "end", end.typ())
	for _, header := range []string{server.HeaderLastEventID, server.HeaderResumeFromSequence} {
		res := h.do(http.MethodGet, "/sse?sessionId="+done, "alice", nil, header, strconv.FormatInt(end.id, 10))
		require.Equal(t, http.StatusNoContent, res.status, "%s: %s", header, res.raw)
	}
	res := h.do(http.MethodGet, "/sse?sessionId="+done+"&fromSequence="+strconv.FormatInt(end.id, 10), "alice", nil)
	require.Equal(t, http.StatusNoContent, res.status, "body: %s", res.raw)
	rest := openSSE(t, h.ts.URL, "sessionId="+done, "alice", server.HeaderLastEventID, strconv.FormatInt(full[len(full)-2].id, 10)).until(isEnd)
	require.Equal(t, []int64{end.id}, ids(rest), "a client that missed the end gets it")
	require.Equal(t, "end", rest[0].typ())

	// A failed stream: its last id is the error chunk's (the fail event
	// has none).
	failed, _ := h.start("alice", map[string]any{"agentType": "approver", "message": "pay"})
	h.waitStatus("alice", failed, "suspended_client_tool")
	require.Equal(t, http.StatusOK, h.do(http.MethodPost, "/abort", "alice", map[string]any{"sessionId": failed}).status)
	events := openSSE(t, h.ts.URL, "sessionId="+failed, "alice").until(isEnd)
	require.Equal(t, "fail", events[len(events)-1].typ())
	last := events[len(events)-2]
	require.Equal(t, string(helix.ChunkError), last.chunkType())
	res = h.do(http.MethodGet, "/sse?sessionId="+failed, "alice", nil, server.HeaderLastEventID, strconv.FormatInt(last.id, 10))
	require.Equal(t, http.StatusNoContent, res.status, "body: %s", res.raw)

	// Without a position the current run is replayed, end included.
	again := openSSE(t, h.ts.URL, "sessionId="+done, "alice").until(isEnd)
	require.Equal(t, ids(full), ids(again))
}

// smallBufferServer serves h on an httptest server whose connections have
// a small kernel send buffer, so that a client that stops reading blocks
// the server's writes after a few kilobytes.
func smallBufferServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(h)
	ts.Listener = smallBufferListener{ts.Listener}
	ts.Start()
	t.Cleanup(ts.Close)
	return ts
}

type smallBufferListener struct{ net.Listener }

func (l smallBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}

// stalledRequest sends a GET with headers on a connection with a small
// receive buffer and never reads the response: the client of a stream
// that stopped reading. It returns the connection (closed by the test's
// cleanup).
func stalledRequest(t *testing.T, base, target string, headers ...string) net.Conn {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(4<<10))
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\n", target, u.Host)
	for i := 0; i+1 < len(headers); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", headers[i], headers[i+1])
	}
	b.WriteString("\r\n")
	_, err = conn.Write([]byte(b.String()))
	require.NoError(t, err)
	return conn
}

// bigAnswer is an answer of 512 deltas of 4 KiB (2 MiB): far more than
// the socket buffers between a server and a client that stopped reading.
func bigAnswer() []string {
	big := make([]string, 512)
	for i := range big {
		big[i] = strings.Repeat("x", 4<<10)
	}
	return big
}

// A client that stops reading does not pin its SSE handler: the write
// that cannot complete within StreamWriteTimeout ends the response, and
// the handler returns (the request is counted as answered).
func TestSSEWriteTimeout(t *testing.T) {
	t.Parallel()
	agent := &helix.Agent{Name: "big", Model: scripted.New(scripted.Step{Deltas: bigAnswer()})}
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{agent}, StreamWriteTimeout: 300 * time.Millisecond})
	id, _ := h.start("alice", map[string]any{"agentType": "big", "message": "hi"})
	h.waitStatus("alice", id, "completed")

	ts := smallBufferServer(t, h.srv.Handler())
	conn := stalledRequest(t, ts.URL, "/sse?sessionId="+id, "Authorization", "Bearer alice")
	answered := `helix_http_requests_total{code="200",method="GET",route="sse"}`
	eventually(t, "the stalled SSE handler to return", func() bool {
		return len(h.metricLines(answered)) > 0 && h.metricValue(answered) == 1
	})
	h.requireMetric("helix_sse_connections", 0)

	// The client got the beginning of the stream, not its end.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	got, _ := io.ReadAll(conn) // ends with EOF or a reset: the server closed the connection
	require.Contains(t, string(got), "text/event-stream")
	require.NotContains(t, string(got), `"type":"end"`)
}

// A step's lifecycle chunks are stored as a marker row (format 4) and
// rendered from the step's checkpoint and messages when read. A client
// that resumes from any sequence, inside a marker row's range included,
// on another instance, gets the exact tail of a full read: the same
// sequences and the same bytes.
func TestSSEResumeInsideMarkerRows(t *testing.T) {
	t.Parallel()
	lookup := helix.MustNewTool("lookup", "Look a key up", func(ctx context.Context, in struct {
		Key string `json:"key"`
	}, tc helix.ToolContext) (map[string]any, error) {
		return map[string]any{"key": in.Key, "value": len(in.Key)}, nil
	})
	agent := func() *helix.Agent {
		return &helix.Agent{Name: "looker", Tools: []*helix.Tool{lookup}, Model: scripted.New(
			scripted.Step{ToolCalls: []scripted.Call{{ID: "k1", Name: "lookup", Args: map[string]any{"key": "a"}}}},
			scripted.Step{Text: "two at once", ToolCalls: []scripted.Call{
				{ID: "k2", Name: "lookup", Args: map[string]any{"key": "bb"}}, {ID: "k3", Name: "lookup", Args: map[string]any{"key": "ccc"}}}},
			scripted.Step{ToolCalls: []scripted.Call{{ID: "k4", Name: "lookup", Args: map[string]any{"key": "<dddd>"}}}},
			scripted.Step{Text: "all looked up"},
		)}
	}
	a := newHarness(t, "", "exec-a", server.Config{Agents: []*helix.Agent{agent()}})
	b := newHarness(t, a.db, "exec-b", server.Config{Agents: []*helix.Agent{agent()}})

	res := a.do(http.MethodPost, "/start", "alice", map[string]any{"agentType": "looker", "message": "look them up"})
	require.Equal(t, http.StatusAccepted, res.status, "body: %s", res.raw)
	id := res.body["sessionId"].(string)
	query := strings.TrimPrefix(res.body["streamUrl"].(string), "/sse?")
	full := openSSE(t, a.ts.URL, query, "alice").until(isEnd)
	require.Equal(t, "end", full[len(full)-1].typ())

	var markers int
	require.NoError(t, a.pool().QueryRow(t.Context(), `SELECT count(*) FROM helix.stream_chunks c JOIN helix.streams t ON t.key = c.stream_key
		WHERE t.stream_id = $1 AND left(c.chunk::text, 3) = '[4,'`, id).Scan(&markers))
	require.GreaterOrEqual(t, markers, 3, "the tool steps' lifecycle chunks are marker rows")

	for i, ev := range full[:len(full)-1] {
		resumed := openSSE(t, b.ts.URL, query, "alice", server.HeaderLastEventID, strconv.FormatInt(ev.id, 10)).until(isEnd)
		want := full[i+1:]
		require.Equal(t, ids(want), ids(resumed), "resumed after %d", ev.id)
		for j := range want[:len(want)-1] {
			require.Equal(t, want[j].raw, resumed[j].raw, "resumed after %d: the bytes of chunk %d", ev.id, want[j].id)
		}
	}
}
