package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store"
)

// completedSession runs the research agent to completion on a fresh
// database and returns the database URL and the run's handle.
func completedSession(t *testing.T) (string, *engine.Engine, *engine.Handle) {
	t.Helper()
	url := pgtest.NewURL(t)
	agent := newResearchAgent(researchOpts{})
	e := newTestEngine(t, url, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: researchQuestion}, &engine.ExecuteOptions{SessionID: "research-1"})
	require.NoError(t, err)
	res := waitResult(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	return url, e, h
}

func TestSessionsCommands(t *testing.T) {
	t.Parallel()
	url, _, h := completedSession(t)
	db := []string{"--database-url", url}
	cli := func(args ...string) string { t.Helper(); return mustCLI(t, append(args, db...)...) }

	t.Run("list", func(t *testing.T) {
		out := cli("sessions", "list")
		require.Regexp(t, `(?m)^SESSION\s+AGENT\s+STATUS\s+STEPS\s+MESSAGES\s+UPDATED$`, out)
		require.Regexp(t, `(?m)^research-1\s+research-assistant\s+completed\s+3\s+8\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$`, out)
		require.Equal(t, "no sessions\n", cli("sessions", "list", "--status", "active"))
		require.Equal(t, "no sessions\n", cli("sessions", "list", "--agent", "someone-else"))
		require.Contains(t, cli("sessions", "list", "--status", "completed", "--agent", researchAgentName, "--limit", "1"), "research-1")
		_, err := runCLI(t, append([]string{"sessions", "list", "--status", "finished"}, db...)...)
		require.ErrorContains(t, err, `--status: helix: unknown session status "finished"`)

		var list []store.SessionSummary
		require.NoError(t, json.Unmarshal([]byte(cli("sessions", "list", "--json")), &list))
		require.Len(t, list, 1)
		require.Equal(t, "research-1", list[0].SessionID)
		require.Equal(t, helix.SessionCompleted, list[0].Status)
		require.Equal(t, 3, list[0].StepCount)
		require.Equal(t, 8, list[0].MessageCount)
		require.Equal(t, "[]\n", cli("sessions", "list", "--json", "--status", "failed"), "an empty list is still JSON")
	})

	t.Run("show", func(t *testing.T) {
		st, err := h.State(t.Context())
		require.NoError(t, err)
		out := cli("sessions", "show", "research-1")
		require.Regexp(t, `(?m)^status\s+completed$`, out)
		require.Regexp(t, `(?m)^steps\s+3 \(this turn\)$`, out)
		require.Regexp(t, `(?m)^checkpoint\s+`+regexp.QuoteMeta(st.CheckpointID)+` \(step 3, 8 messages, `, out)
		require.Regexp(t, `(?m)^current run\s+turn 1 · `+h.RunID+` · completed · 3 steps · workflow `+h.WorkflowID+`$`, out)
		require.Contains(t, out, "custom state:\n  {\n    \"notes\": [")
		require.Contains(t, out, "output:\n  {\n    \"answer\": \"Durable execution")
		require.NotContains(t, out, "error")

		var d sessionDetail
		require.NoError(t, json.Unmarshal([]byte(cli("sessions", "show", "research-1", "--json")), &d))
		require.Equal(t, helix.SessionCompleted, d.Session.Status)
		require.Equal(t, st.CheckpointID, d.Checkpoint.ID)
		require.Equal(t, 3, d.Checkpoint.StepCount)
		require.Equal(t, h.RunID, d.CurrentRun.RunID)
		require.Equal(t, helix.StreamEnded, d.Stream.Status)
		var state researchState
		require.NoError(t, json.Unmarshal(d.Session.CustomState, &state))
		require.Len(t, state.Sources, 3)
		require.JSONEq(t, string(st.Output), string(d.Session.Output))

		_, err = runCLI(t, append([]string{"sessions", "show", "nope"}, db...)...)
		require.ErrorIs(t, err, helix.ErrNotFound)
	})

	t.Run("messages", func(t *testing.T) {
		out := cli("sessions", "messages", "research-1")
		require.Contains(t, out, "#0    user      "+researchQuestion+"\n")
		require.Contains(t, out, "#1    assistant "+step1Text+"\n"+
			`                → call search_web {"query":"durable execution for LLM agents"} (call_web)`+"\n"+
			`                → call search_docs {"query":"workflow recovery after a crash"} (call_docs)`+"\n")
		require.Contains(t, out, `#3    tool      search_docs (call_docs) → {"results":[{"title":"Workflow recovery","url":"https://example.org/docs/workflow-recovery"}]}`)
		require.Contains(t, out, "#7    tool      __finish__ (call-2-0)")
		require.True(t, strings.HasSuffix(out, "messages 0–7 of 8\n"), out)

		out = cli("sessions", "messages", "research-1", "--offset", "2", "--limit", "2")
		require.Contains(t, out, "#2    tool      search_web")
		require.Contains(t, out, "#3    tool      search_docs")
		require.NotContains(t, out, "#1 ")
		require.NotContains(t, out, "#4 ")
		require.True(t, strings.HasSuffix(out, "messages 2–3 of 8 (more: --offset 4)\n"), out)

		var page store.MessagePage
		require.NoError(t, json.Unmarshal([]byte(cli("sessions", "messages", "research-1", "--json", "--offset", "1", "--limit", "1")), &page))
		require.Equal(t, 8, page.Total)
		require.True(t, page.HasMore)
		require.Len(t, page.Messages, 1)
		require.Equal(t, helix.RoleAssistant, page.Messages[0].Role)
		require.Len(t, page.Messages[0].ToolCalls, 2)
	})

	t.Run("runs", func(t *testing.T) {
		out := cli("sessions", "runs", "research-1")
		require.Regexp(t, `(?m)^TURN\s+RUN\s+STATUS\s+STEPS\s+WORKFLOW\s+STARTED\s+ENDED\s+ERROR$`, out)
		require.Regexp(t, `(?m)^1\s+`+h.RunID+`\s+completed\s+3\s+`+h.WorkflowID+`\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+\d{4}-`, out)
		var runs []store.Run
		require.NoError(t, json.Unmarshal([]byte(cli("sessions", "runs", "research-1", "--json")), &runs))
		require.Len(t, runs, 1)
		require.Equal(t, h.RunID, runs[0].RunID)
		require.Equal(t, helix.RunCompleted, runs[0].Status)
		require.NotNil(t, runs[0].CompletedAt)
		_, err := runCLI(t, append([]string{"sessions", "runs", "nope"}, db...)...)
		require.ErrorIs(t, err, helix.ErrNotFound)
	})
}

// seqOf returns the sequence numbers at the start of the output's lines.
func seqOf(t *testing.T, out string) []int64 {
	t.Helper()
	var seqs []int64
	re := regexp.MustCompile(`^\s*(\d+)  \S`)
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			n, err := strconv.ParseInt(m[1], 10, 64)
			require.NoError(t, err)
			seqs = append(seqs, n)
		}
	}
	return seqs
}

func TestStreamCommand(t *testing.T) {
	t.Parallel()
	url, e, _ := completedSession(t)
	db := []string{"--database-url", url}
	cli := func(args ...string) string { t.Helper(); return mustCLI(t, append(args, db...)...) }

	chunks, err := e.StreamChunks(t.Context(), "research-1", 0, 1000)
	require.NoError(t, err)
	require.Greater(t, len(chunks), 20)
	from := chunks[len(chunks)/2].Sequence

	out := cli("stream", "research-1", "--from", fmt.Sprint(from), "--no-follow")
	seqs := seqOf(t, out)
	require.NotEmpty(t, seqs)
	require.Greater(t, seqs[0], from, "--from N starts after N")
	require.IsIncreasing(t, seqs)
	require.Equal(t, chunks[len(chunks)-1].Sequence, seqs[len(seqs)-1])
	require.Regexp(t, `(?m)^\s+\d+  stream_end\s+-\s+final output \{"answer"`, out)
	require.Regexp(t, `(?m)^\s+\d+  step_committed\s+research-assistant\s+step 3 · checkpoint `, out)

	// From the start: the text deltas of a step are one line.
	out = cli("stream", "research-1", "--no-follow", "--max-width", "0")
	require.Contains(t, out, "text_delta           research-assistant   "+step2Text+"\n")
	require.Equal(t, 3, strings.Count(out, "  text_delta "), "one text line per step")

	// Following a session that is no longer active prints what is stored
	// and returns.
	require.Equal(t, out, cli("stream", "research-1", "--max-width", "0"))

	// --json: one object per chunk, with the stored chunk as is.
	out = cli("stream", "research-1", "--from", fmt.Sprint(from), "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, len(chunks)-len(chunks)/2-1)
	var last jsonChunk
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &last))
	require.Equal(t, chunks[len(chunks)-1].Sequence, last.Sequence)
	require.Contains(t, string(last.Chunk), `"type":"stream_end"`)

	require.Equal(t, fmt.Sprintf("no chunks after sequence %d\n", seqs[len(seqs)-1]),
		cli("stream", "research-1", "--from", fmt.Sprint(seqs[len(seqs)-1]), "--no-follow"))
	_, err = runCLI(t, append([]string{"stream", "research-1", "--from", "-1"}, db...)...)
	require.ErrorContains(t, err, "--from must be >= 0")
}

// gate holds the research agent before a step until released.
type gate struct {
	step     int
	reached  chan struct{}
	release  chan struct{}
	once     sync.Once
	released sync.Once
}

func newGate(step int) *gate {
	return &gate{step: step, reached: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) beforeStep(ctx context.Context, step int) error {
	if step != g.step {
		return nil
	}
	g.once.Do(func() { close(g.reached) })
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) open() { g.released.Do(func() { close(g.release) }) }

// stream --follow prints a running session live and returns at its end.
func TestStreamFollowsALiveRun(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	g := newGate(2)
	t.Cleanup(g.open)
	agent := newResearchAgent(researchOpts{beforeStep: g.beforeStep})
	e := newTestEngine(t, url, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: researchQuestion}, &engine.ExecuteOptions{SessionID: "live"})
	require.NoError(t, err)
	<-g.reached

	// The command prints step 1 while the run waits before step 2: it is
	// following a live session, not printing a finished one.
	out := &watchWriter{want: "step 1 · checkpoint", seen: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		cmd := newRootCmd()
		cmd.SetOut(out)
		cmd.SetArgs([]string{"stream", "live", "--database-url", url})
		done <- cmd.ExecuteContext(t.Context())
	}()
	select {
	case <-out.seen:
	case err := <-done:
		t.Fatalf("stream returned before the run ended: %v\n%s", err, out.String())
	}
	g.open()
	require.NoError(t, <-done)
	r := struct{ out string }{out.String()}
	require.Equal(t, helix.AgentCompleted, waitResult(t, h).Status)
	require.Contains(t, r.out, "step_committed       research-assistant   step 1 ·")
	require.Contains(t, r.out, "step_committed       research-assistant   step 3 ·")
	require.Regexp(t, `stream_end\s+-\s+final output`, r.out)
	chunks, err := e.StreamChunks(t.Context(), "live", 0, 1000)
	require.NoError(t, err)
	seqs := seqOf(t, r.out)
	require.Equal(t, chunks[len(chunks)-1].Sequence, seqs[len(seqs)-1], "it printed up to stream_end")
}

// watchWriter collects output and closes seen once it contains want.
type watchWriter struct {
	mu   sync.Mutex
	b    strings.Builder
	want string
	seen chan struct{}
	once sync.Once
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if strings.Contains(w.b.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *watchWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
