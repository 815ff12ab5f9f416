package helixtest_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/helixtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
	"github.com/helix-agents/helix-dbos/store"
)

const day = 24 * time.Hour

type question struct {
	Question string `json:"question"`
}

type reply struct {
	Answer string `json:"answer"`
}

// asker asks the user through a client-executed tool with a 24-hour
// deadline, then answers whatever it learned.
func asker(name string) *helix.Agent {
	ask := helix.MustNewClientTool[question, reply]("ask_user", "Ask the user", helix.ClientTimeout(day))
	return &helix.Agent{Name: name, SystemPrompt: "help", Tools: []*helix.Tool{ask}, Model: scripted.New(
		scripted.Step{ToolCalls: []scripted.Call{{Name: "ask_user", Args: question{Question: "which order?"}}}},
		scripted.Step{Text: "done"},
	)}
}

// usage returns the value of the session's usage row of sourceType.
func usage(t *testing.T, e *helixtest.Engine, sessionID, sourceType string) store.UsageRecord {
	t.Helper()
	rows, err := e.Usage(t.Context(), sessionID)
	require.NoError(t, err)
	for _, r := range rows {
		if r.SourceType == sourceType {
			return r
		}
	}
	t.Fatalf("no %s usage row in session %s (rows: %+v)", sourceType, sessionID, rows)
	return store.UsageRecord{}
}

// requireTimedOut checks what the model and the stream saw of a client
// tool whose 24-hour deadline passed: the same as in production.
func requireTimedOut(t *testing.T, e *helixtest.Engine, sessionID string) {
	t.Helper()
	msgs := e.Messages(sessionID)
	require.Len(t, msgs, 4, "user, assistant with the call, tool result, answer")
	require.Equal(t, helix.RoleTool, msgs[2].Role)
	var result struct{ Error string }
	require.NoError(t, json.Unmarshal([]byte(msgs[2].Content), &result), msgs[2].Content)
	require.Equal(t, `the client did not return a result for tool "ask_user" within 24h0m0s: treat the call as failed`,
		result.Error, "the model sees the timeout error")
	require.Equal(t, "done", msgs[3].Content)

	var ends []*helix.ToolEndChunk
	for _, c := range e.Stream(sessionID) {
		if end, ok := c.Chunk.(*helix.ToolEndChunk); ok {
			ends = append(ends, end)
		}
	}
	require.Len(t, ends, 1)
	require.Equal(t, helix.CodeClientToolTimeout, ends[0].ErrorCode)
	tool := usage(t, e, sessionID, store.UsageTool)
	require.False(t, tool.Success)
	require.NotNil(t, tool.DurationMS)
	require.GreaterOrEqual(t, *tool.DurationMS, (day + time.Second).Milliseconds(), "the call waited a day on the clock")

	_, err := e.SubmitToolResult(t.Context(), sessionID, mustResult(t, "call-0-0", reply{Answer: "late"}))
	var se *helix.SubmissionError
	require.ErrorAs(t, err, &se, "an answer after the deadline is refused")
	require.Equal(t, helix.SubmissionTimedOut, se.Code)
}

func mustResult(t *testing.T, toolCallID string, v any) helix.ToolSubmission {
	t.Helper()
	sub, err := helix.ClientToolResult(toolCallID, v)
	require.NoError(t, err)
	return sub
}

// A client tool's 24-hour deadline passes when the test moves the clock a
// day forward: the call times out as it would in production.
func TestClockTimesOutADayLongDeadline(t *testing.T) {
	t.Parallel()
	began := time.Now()
	clock := &helixtest.Clock{}
	agent := asker("asker")
	e := helixtest.NewEngine(t, helixtest.EngineOptions{Clock: clock}, agent)
	h := e.Start(agent, "help")
	call := e.AwaitPending(h.SessionID, "call-0-0")
	require.Equal(t, day.Milliseconds(), call.DeadlineAt-call.CreatedAt, "the deadline is a day after the call")
	require.Equal(t, helix.AgentSuspendedClientTool, e.Result(h).Status)

	advanced := time.Now()
	clock.Advance(day + time.Second)
	res := e.Await(h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	t.Logf("a 24-hour deadline passed: the session completed %s after Advance, %s after the test began",
		time.Since(advanced), time.Since(began))
	requireTimedOut(t, e, h.SessionID)
}

// A call answered after 23 hours on the clock, before its deadline, keeps
// its answer.
func TestClockAnswerBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	clock := &helixtest.Clock{}
	agent := asker("asker")
	e := helixtest.NewEngine(t, helixtest.EngineOptions{Clock: clock}, agent)
	h := e.Start(agent, "help")
	e.AwaitPending(h.SessionID, "call-0-0")

	clock.Advance(23 * time.Hour)
	require.Len(t, e.Pending(h.SessionID), 1, "still waiting: an hour is left")
	e.Answer(h.SessionID, "call-0-0", reply{Answer: "A-1"})
	res := e.Await(h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)

	msgs := e.Messages(h.SessionID)
	require.Len(t, msgs, 4)
	var got reply
	require.NoError(t, json.Unmarshal([]byte(msgs[2].Content), &got), msgs[2].Content)
	require.Equal(t, "A-1", got.Answer)
	wait := usage(t, e, h.SessionID, store.UsageClientToolWaitMS)
	require.NotNil(t, wait.Value)
	require.GreaterOrEqual(t, *wait.Value, float64((23 * time.Hour).Milliseconds()), "the wait is measured on the clock")
	require.Less(t, *wait.Value, float64(day.Milliseconds()))
}

// An approval awaited for a week on the clock (an approval has no deadline)
// still runs its tool, once, when it comes.
func TestClockApprovalAwaitedForAWeek(t *testing.T) {
	t.Parallel()
	const week = 7 * day
	clock := &helixtest.Clock{}
	var runs atomic.Int32
	agent := support("weekly", lookup(&runs, helix.RequireApproval()))
	e := helixtest.NewEngine(t, helixtest.EngineOptions{Clock: clock}, agent)
	h := e.Start(agent, "where is my order?")
	call := e.AwaitPending(h.SessionID, "")

	clock.Advance(week)
	require.Len(t, e.Pending(h.SessionID), 1, "an approval waits as long as it takes")
	e.Approve(h.SessionID, call.ToolCallID)
	res := e.Await(h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.EqualValues(t, 1, runs.Load())
	wait := usage(t, e, h.SessionID, store.UsageClientToolWaitMS)
	require.NotNil(t, wait.Value)
	require.GreaterOrEqual(t, *wait.Value, float64(week.Milliseconds()), "the approval waited a week on the clock")
}

// The deadline is stored as an absolute time on the clock: an engine that
// replaces a stopped one, given the same Clock, resumes the wait and times
// the call out when the clock passes it, not before.
func TestClockReplacementKeepsTheDeadline(t *testing.T) {
	t.Parallel()
	clock := &helixtest.Clock{}
	agent := asker("asker")
	first := helixtest.NewEngine(t, helixtest.EngineOptions{Clock: clock}, agent)
	h := first.Start(agent, "help")
	first.AwaitPending(h.SessionID, "call-0-0")
	clock.Advance(12 * time.Hour)
	require.NoError(t, first.Shutdown(t.Context()))

	next := helixtest.NewEngine(t, helixtest.EngineOptions{DatabaseURL: first.URL(), ExecutorID: first.ExecutorID(), Clock: clock}, agent)
	next.AwaitStatus(h.SessionID, helix.SessionActive)
	require.Len(t, next.Pending(h.SessionID), 1, "half the deadline is left")
	clock.Advance(12*time.Hour + time.Second)
	next.AwaitStatus(h.SessionID, helix.SessionCompleted)
	requireTimedOut(t, next, h.SessionID)
}

// An engine with a queue refuses a Clock: a queued run's driver waits in
// real time, and the kit does not pretend otherwise.
func TestClockRefusedWithAQueue(t *testing.T) {
	t.Parallel()
	_, err := engine.New(context.Background(), engine.Config{DatabaseURL: "postgres://unused", Clock: &helixtest.Clock{},
		Queue: &engine.QueueConfig{}})
	require.ErrorContains(t, err, "Config.Clock cannot be combined with Config.Queue")
}

func TestClockAdvance(t *testing.T) {
	t.Parallel()
	var clock helixtest.Clock
	require.WithinDuration(t, time.Now(), clock.Now(), time.Minute, "the zero value reads the real time")
	woken := clock.Advanced()
	select {
	case <-woken:
		t.Fatal("woken before an advance")
	default:
	}
	before := clock.Now()
	after := clock.Advance(day)
	require.GreaterOrEqual(t, after.Sub(before), day)
	<-woken // closed by the advance
	require.NotEqual(t, woken, clock.Advanced(), "the next advance closes a new channel")
	require.Panics(t, func() { clock.Advance(-time.Second) })
}
