package helixtest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
)

// CrashPoint is a point of the agent loop where a kit engine crashes
// (EngineOptions.CrashAt): the run stops there, nothing more of it is
// recorded, and the engine shuts down at once when the test calls
// [Engine.AwaitCrash], as if its process had been killed at that instant.
// A replacement engine ([Engine.Replacement]) then continues the session
// from its last recorded step, as a new process would.
type CrashPoint struct {
	// At is the loop's point: engine.ProbeAfterModelCall,
	// engine.ProbeAfterTool, engine.ProbeAfterToolCommit or
	// engine.ProbeAfterCommit.
	At engine.ProbePoint
	// Step, when not 0, crashes only at that step of a session (steps
	// count from 1).
	Step int
	// Tool, for ProbeAfterTool and ProbeAfterToolCommit, crashes only
	// after that tool ("" any).
	Tool string
}

// AfterModelCall crashes after the model call of step (0: the first step
// that gets there), before its tools run. The model call is recorded when
// the step's tools run application code, so the replacement does not call
// the model again; a step of only client tools or approvals records it with
// its suspension, and the replacement calls the model again.
func AfterModelCall(step int) CrashPoint {
	return CrashPoint{At: engine.ProbeAfterModelCall, Step: step}
}

// AfterTool crashes inside the tool's step once the tool returned: its
// effects are done, its result is not recorded. The replacement runs the
// tool again, with the same idempotency key (ToolContext.IdempotencyKey):
// the crash point that proves a tool idempotent.
func AfterTool(tool string) CrashPoint { return CrashPoint{At: engine.ProbeAfterTool, Tool: tool} }

// AfterToolCommit crashes once a transactional tool's transaction
// (helix.NewTxTool) committed its writes with its record: the step's
// commit, for a step whose only call it is, or the call's own transaction,
// for parallel calls. The replacement does not run the tool again: its
// writes are in the app's tables once, and the replay returns the recorded
// result. With a transactional tool, AfterTool crashes before that
// commit: its writes roll back and the replacement runs it again, once.
func AfterToolCommit(tool string) CrashPoint {
	return CrashPoint{At: engine.ProbeAfterToolCommit, Tool: tool}
}

// AfterCommit crashes once step (0: the first step) committed, before the
// next step begins.
func AfterCommit(step int) CrashPoint { return CrashPoint{At: engine.ProbeAfterCommit, Step: step} }

func (p CrashPoint) String() string {
	s := string(p.At)
	if p.Step != 0 {
		s += fmt.Sprintf(" of step %d", p.Step)
	}
	if p.Tool != "" {
		s += " of tool " + p.Tool
	}
	return s
}

func (p CrashPoint) matches(at engine.ProbeInfo) bool {
	return at.Point == p.At && (p.Step == 0 || at.Step == p.Step) && (p.Tool == "" || at.ToolName == p.Tool)
}

// crashState is a kit engine's crash point.
type crashState struct {
	point   CrashPoint
	once    sync.Once
	reached chan engine.ProbeInfo
}

// probe is the engine's Config.Probe: it stops the first run that reaches
// the point.
func (c *crashState) probe(_ context.Context, at engine.ProbeInfo) error {
	if !c.point.matches(at) {
		return nil
	}
	fired := false
	c.once.Do(func() { fired = true; c.reached <- at })
	if fired {
		return engine.ProbeStop(at)
	}
	return nil
}

// AwaitCrash waits until a run reached the engine's crash point
// (EngineOptions.CrashAt), then shuts the engine down at once, and returns
// where the run stopped. It fails the test when the engine has no crash
// point or no run gets there within the engine's timeout.
func (e *Engine) AwaitCrash() engine.ProbeInfo {
	e.t.Helper()
	if e.crash == nil {
		e.t.Fatalf("helixtest: AwaitCrash on an engine without a crash point: set EngineOptions.CrashAt")
	}
	ctx, cancel := e.context()
	defer cancel()
	select {
	case at := <-e.crash.reached:
		e.Crash()
		return at
	case <-ctx.Done():
		e.t.Fatalf("helixtest: no run reached the crash point %s within %s", e.crash.point, e.timeout)
		return engine.ProbeInfo{}
	}
}

// Crash stops the engine now (a run waiting for an approval or a client
// tool, a step in flight: whatever it was doing is lost unless recorded),
// as a killed process would. Start a [Engine.Replacement] to go on.
func (e *Engine) Crash() {
	e.t.Helper()
	if err := e.stop(); err != nil {
		// What was in flight is abandoned, as by a crash; the shutdown
		// says so when it waited in vain.
		e.t.Logf("helixtest: engine %s crashed: %v", e.ExecutorID(), err)
	}
}

// ReplacementOptions configure [Engine.Replacement].
type ReplacementOptions struct {
	// NewExecutorID starts the replacement under a new executor ID: it
	// takes the crashed engine's sessions over, as a peer replica does.
	// By default it restarts under the same ID and resumes them at
	// launch, as a restarted process does.
	NewExecutorID bool
}

// Replacement starts a new engine on the same database with the same agents
// and options, without the crash point: the process that replaces a
// crashed one. Reattach to a session's run with [Engine.Attach].
func (e *Engine) Replacement(opts ReplacementOptions) *Engine {
	e.t.Helper()
	o := e.opts
	o.DatabaseURL, o.CrashAt = e.url, nil
	o.ExecutorID = e.ExecutorID()
	if opts.NewExecutorID {
		o.ExecutorID = ""
	}
	return NewEngine(e.t, o, e.agents...)
}

// Attach returns the handle of h's run on this engine (h was returned by
// another engine, a crashed one).
func (e *Engine) Attach(h *engine.Handle) *engine.Handle {
	e.t.Helper()
	ctx, cancel := e.context()
	defer cancel()
	nh, err := e.Run(ctx, h.SessionID, h.RunID)
	if err != nil {
		e.t.Fatalf("helixtest: attach to run %s of session %s: %v", h.RunID, h.SessionID, err)
	}
	return nh
}

// Executions records the executions of tools by idempotency key: call
// Record where a tool applies its effect. After a crash inside a tool
// (AfterTool), the engine runs the tool again with the same key; a tool
// that applies its effect once per key keeps every count at 1, which
// RequireOncePerCall checks. It is safe for concurrent use.
type Executions struct {
	mu     sync.Mutex
	counts map[string]int
}

// Record counts one execution of the call tc belongs to.
func (x *Executions) Record(tc helix.ToolContext) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.counts == nil {
		x.counts = map[string]int{}
	}
	x.counts[tc.IdempotencyKey()]++
}

// Count returns how many times the call with idempotency key was recorded.
func (x *Executions) Count(key string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.counts[key]
}

// Keys returns the recorded idempotency keys, sorted.
func (x *Executions) Keys() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	keys := make([]string, 0, len(x.counts))
	for k := range x.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// RequireOncePerCall fails t unless each of want calls (0: any number)
// was recorded, each exactly once.
func (x *Executions) RequireOncePerCall(t testing.TB, want int) {
	t.Helper()
	x.mu.Lock()
	defer x.mu.Unlock()
	for k, n := range x.counts {
		if n != 1 {
			t.Fatalf("helixtest: tool call %s applied its effect %d times, want once", k, n)
		}
	}
	if want != 0 && len(x.counts) != want {
		t.Fatalf("helixtest: %d tool calls applied their effect, want %d", len(x.counts), want)
	}
}

// RequireTranscriptOnce fails the test when the session's transcript holds
// a message twice: a tool call made by two assistant messages, or a call
// with more or fewer than one result.
func (e *Engine) RequireTranscriptOnce(sessionID string) {
	e.t.Helper()
	calls, results := map[string]int{}, map[string]int{}
	for _, m := range e.Messages(sessionID) {
		for _, c := range m.ToolCalls {
			calls[c.ID]++
		}
		if m.Role == helix.RoleTool {
			results[m.ToolCallID]++
		}
	}
	for id, n := range calls {
		if n != 1 || results[id] != 1 {
			e.t.Fatalf("helixtest: session %s: tool call %s is in %d assistant messages and has %d results, want 1 and 1",
				sessionID, id, n, results[id])
		}
	}
	for id, n := range results {
		if calls[id] == 0 {
			e.t.Fatalf("helixtest: session %s: %d results for tool call %s, which no assistant message made", sessionID, n, id)
		}
	}
}

// RequireStreamGapFree fails the test when the session's stream has a gap
// in its sequence numbers or holds a step's lifecycle chunk (step_start,
// tool_start, tool_end, step_end, checkpoint_created, step_committed) twice:
// what a crash may not leave behind (a lost attempt's chunks are removed
// and marked by stream_resync). For a session without Retry or Branch,
// which replay steps on purpose.
func (e *Engine) RequireStreamGapFree(sessionID string) {
	e.t.Helper()
	seen := map[string]int64{}
	chunks := e.Stream(sessionID)
	for i, c := range chunks {
		if i > 0 && c.Sequence != chunks[i-1].Sequence+1 {
			e.t.Fatalf("helixtest: session %s: stream jumps from %d to %d", sessionID, chunks[i-1].Sequence, c.Sequence)
		}
		key := lifecycleKey(c.Chunk)
		if key == "" {
			continue
		}
		if first, dup := seen[key]; dup {
			e.t.Fatalf("helixtest: session %s: %s at sequences %d and %d", sessionID, key, first, c.Sequence)
		}
		seen[key] = c.Sequence
	}
}

// lifecycleKey names a lifecycle chunk by its type, agent, step and call
// ("" for other chunks).
func lifecycleKey(c helix.Chunk) string {
	call := ""
	switch c := c.(type) {
	case *helix.ToolStartChunk:
		call = c.ToolCallID
	case *helix.ToolEndChunk:
		call = c.ToolCallID
	case *helix.StepStartChunk, *helix.StepEndChunk, *helix.CheckpointCreatedChunk, *helix.StepCommittedChunk:
	default:
		return ""
	}
	agent, step := "", 0
	if b := c.ChunkBase(); b != nil {
		agent, step = b.AgentID, b.Step
	}
	return fmt.Sprintf("%s of %s step %d %s", c.ChunkType(), agent, step, call)
}
