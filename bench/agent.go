package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	helix "github.com/helix-agents/helix-dbos"
)

// Durable identities of the bench agent: constants, like every persisted
// name.
const (
	// AgentName is the agent type of the sessions Run writes.
	AgentName = "helix-bench"
	// ToolName is the bench agent's no-op tool.
	ToolName = "noop"
)

// trace records the timing of one session's steps as the model and the
// tool see them. Index i holds step i (1-based; index 0 is unused).
type trace struct {
	steps int
	done  chan struct{} // closed when the last step's model call returns

	mu     sync.Mutex
	enter  []time.Time
	exit   []time.Time
	tool   []time.Duration
	repeat int // model calls for a step already played (replays)
	err    error
	// snaps are taken while the model plays these steps (between the
	// enter and exit stamps, so outside the measured overhead).
	snaps map[int]*sqlSnapshot
}

func newTrace(steps int) *trace {
	return &trace{
		steps: steps, done: make(chan struct{}),
		enter: make([]time.Time, steps+1), exit: make([]time.Time, steps+1), tool: make([]time.Duration, steps+1),
	}
}

// overheads returns the engine overhead between consecutive steps:
// enter(i+1) − exit(i) − tool(i), for i = 1..steps−1.
func (t *trace) overheads() ([]time.Duration, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return nil, t.err
	}
	if t.repeat > 0 {
		return nil, fmt.Errorf("bench: %d model calls repeated a step: the session was replayed, its timing is not a clean sample", t.repeat)
	}
	out := make([]time.Duration, 0, t.steps-1)
	for i := 1; i < t.steps; i++ {
		if t.exit[i].IsZero() || t.enter[i+1].IsZero() {
			return nil, fmt.Errorf("bench: step %d or %d was never played", i, i+1)
		}
		out = append(out, t.enter[i+1].Sub(t.exit[i])-t.tool[i])
	}
	return out, nil
}

func (t *trace) fail(err error) {
	t.mu.Lock()
	if t.err == nil {
		t.err = err
	}
	t.mu.Unlock()
}

// script is the bench agent's model and tool, shared by every session of a
// harness; sessions are found by ID.
type script struct {
	tracer *sqlTracer
	// txTool makes the tool transactional (Config.TxTool).
	txTool bool

	mu     sync.RWMutex
	traces map[string]*trace
	played atomic.Int64 // model calls, for progress lines
}

func (s *script) add(sessionID string, t *trace) {
	s.mu.Lock()
	s.traces[sessionID] = t
	s.mu.Unlock()
}

// remove forgets a session that ended (the churn mode runs sessions
// without end).
func (s *script) remove(sessionID string) {
	s.mu.Lock()
	delete(s.traces, sessionID)
	s.mu.Unlock()
}

func (s *script) trace(sessionID string) *trace {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.traces[sessionID]
}

// stamp records that the model played step of t, entered at now (a step
// played twice is a replay), taking the step's SQL snapshot when asked.
func (s *script) stamp(t *trace, step int, now time.Time) {
	s.played.Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.enter[step].IsZero() {
		t.repeat++
	}
	t.enter[step] = now
	if p := t.snaps[step]; p != nil {
		*p = s.tracer.snapshot()
	}
	t.exit[step] = time.Now()
}

// generate is the scripted model: instant, deterministic (a function of the
// step number only, so a replay plays the same step), one tool call per
// step and a text answer at the session's last step.
func (s *script) generate(_ context.Context, req helix.ModelRequest, _ helix.StreamCallbacks) (helix.StepResult, error) {
	now := time.Now()
	t := s.trace(req.AgentID)
	if t == nil {
		return helix.StepResult{}, fmt.Errorf("bench: model called for unknown session %q", req.AgentID)
	}
	if req.Step < 1 || req.Step > t.steps {
		err := fmt.Errorf("bench: model called for step %d of a %d-step session", req.Step, t.steps)
		t.fail(err)
		return helix.StepResult{}, err
	}
	var res helix.StepResult
	if req.Step == t.steps {
		res = helix.StepResult{Type: helix.StepText, Content: "done", StopReason: helix.StopEndTurn}
	} else {
		res = helix.StepResult{Type: helix.StepToolCalls, StopReason: helix.StopToolUse, ToolCalls: []helix.ToolCall{{
			ID: "call-" + strconv.Itoa(req.Step), Name: ToolName, Arguments: json.RawMessage(`{}`),
		}}}
	}
	s.stamp(t, req.Step, now)
	if req.Step == t.steps {
		select {
		case <-t.done:
		default:
			close(t.done)
		}
	}
	return res, nil
}

type noopInput struct{}

type noopOutput struct {
	OK bool `json:"ok"`
}

// TxEffectsTable is the table the transactional bench tool writes
// (Config.TxTool): a row per call.
const TxEffectsTable = "helix_bench_tx_effects"

// tool is the no-op tool; it records its own duration so the overhead can
// exclude it. With Config.TxTool it is a transactional tool whose one
// write is a row of TxEffectsTable.
func (s *script) tool() *helix.Tool {
	if s.txTool {
		insert := `INSERT INTO ` + pgx.Identifier{TxEffectsTable}.Sanitize() + ` (session_id, step) VALUES ($1, $2)`
		return helix.MustNewTxTool(ToolName, "Writes one row.", func(ctx context.Context, tx pgx.Tx, _ noopInput, tc helix.ToolContext) (noopOutput, error) {
			began := time.Now()
			t := s.trace(tc.SessionID())
			if t == nil || tc.Step() < 1 || tc.Step() > t.steps {
				return noopOutput{}, fmt.Errorf("bench: tool called for unknown session %q or step %d", tc.SessionID(), tc.Step())
			}
			if _, err := tx.Exec(ctx, insert, tc.SessionID(), tc.Step()); err != nil {
				return noopOutput{}, err
			}
			t.mu.Lock()
			t.tool[tc.Step()] = time.Since(began)
			t.mu.Unlock()
			return noopOutput{OK: true}, nil
		})
	}
	return helix.MustNewTool(ToolName, "Does nothing.", func(_ context.Context, _ noopInput, tc helix.ToolContext) (noopOutput, error) {
		began := time.Now()
		t := s.trace(tc.SessionID())
		if t == nil || tc.Step() < 1 || tc.Step() > t.steps {
			return noopOutput{}, fmt.Errorf("bench: tool called for unknown session %q or step %d", tc.SessionID(), tc.Step())
		}
		t.mu.Lock()
		t.tool[tc.Step()] = time.Since(began)
		t.mu.Unlock()
		return noopOutput{OK: true}, nil
	})
}

// agent returns the bench agent: no system prompt, no hooks, the no-op
// tool, and a step budget of maxSteps.
func (s *script) agent(maxSteps int) *helix.Agent {
	return &helix.Agent{
		Name:     AgentName,
		Model:    helix.ModelFunc(s.generate),
		Tools:    []*helix.Tool{s.tool()},
		MaxSteps: maxSteps,
	}
}
