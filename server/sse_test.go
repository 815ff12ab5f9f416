package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
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
	chunks, err := h.eng.Store().ReadChunks(t.Context(), sessionID, runs[len(runs)-1].StartSequence, 500)
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

			// The end is final: resuming after it ends at once.
			again := openSSE(t, b.ts.URL, "sessionId="+id, "alice", header, strconv.FormatInt(events[len(events)-1].id, 10))
			rest, _ := again.rest()
			require.Len(t, rest, 1)
			require.Equal(t, "end", rest[0].typ())
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
