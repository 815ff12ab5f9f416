package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
)

// Durable identities of the human-in-the-loop agent.
const (
	// HITLAgentName is the agent type of the human-in-the-loop sessions
	// Run writes.
	HITLAgentName = "helix-bench-hitl"
	// ClientToolName is the human-in-the-loop agent's client-executed
	// tool.
	ClientToolName = "ask_client"
)

const (
	// hitlCallID is the ID of the client tool call of every HITL session
	// (call IDs are scoped to their session).
	hitlCallID = "ask-1"
	// hitlAnswer is the result the bench submits, as the model reads it.
	hitlAnswer = `{"answer":"yes"}`
	// hitlTimeout bounds each phase of a HITL session: reaching the
	// suspension, and reaching the next model call once answered.
	hitlTimeout = 30 * time.Second
)

type clientQuestion struct {
	Question string `json:"question"`
}

type clientAnswer struct {
	Answer string `json:"answer"`
}

// generateHITL is the human-in-the-loop agent's scripted model: instant
// and deterministic, it calls the client tool at step 1 and answers in text
// at step 2, after checking that it reads the submitted result. It stamps
// the time it is entered and takes an SQL snapshot, like generate.
func (s *script) generateHITL(_ context.Context, req helix.ModelRequest, _ helix.StreamCallbacks) (helix.StepResult, error) {
	now := time.Now()
	t := s.trace(req.AgentID)
	if t == nil {
		return helix.StepResult{}, fmt.Errorf("bench: model called for unknown session %q", req.AgentID)
	}
	var res helix.StepResult
	switch req.Step {
	case 1:
		res = helix.StepResult{Type: helix.StepToolCalls, StopReason: helix.StopToolUse, ToolCalls: []helix.ToolCall{{
			ID: hitlCallID, Name: ClientToolName, Arguments: json.RawMessage(`{"question":"Go on?"}`),
		}}}
	case 2:
		if n := len(req.Messages); n == 0 || req.Messages[n-1].Role != helix.RoleTool || req.Messages[n-1].ToolCallID != hitlCallID ||
			req.Messages[n-1].Content != hitlAnswer {
			err := fmt.Errorf("bench: step 2 of session %s does not read the submitted result %s last", req.AgentID, hitlAnswer)
			t.fail(err)
			return helix.StepResult{}, err
		}
		res = helix.StepResult{Type: helix.StepText, Content: "done", StopReason: helix.StopEndTurn}
	default:
		err := fmt.Errorf("bench: model called for step %d of a 2-step session", req.Step)
		t.fail(err)
		return helix.StepResult{}, err
	}
	s.stamp(t, req.Step, now)
	if req.Step == 2 {
		select {
		case <-t.done:
		default:
			close(t.done)
		}
	}
	return res, nil
}

// hitlAgent returns the human-in-the-loop agent: no system prompt, no
// hooks, one client-executed tool, two steps.
func (s *script) hitlAgent() *helix.Agent {
	return &helix.Agent{
		Name:     HITLAgentName,
		Model:    helix.ModelFunc(s.generateHITL),
		Tools:    []*helix.Tool{helix.MustNewClientTool[clientQuestion, clientAnswer](ClientToolName, "Ask the client whether to go on.")},
		MaxSteps: 2,
	}
}

// hitlSample is one answered suspension.
type hitlSample struct {
	toNextStep time.Duration // t0 (just before SubmitToolResult) → the model entered for step 2
	submit     time.Duration // SubmitToolResult itself
	resume     time.Duration // SubmitToolResult's return → the model entered for step 2
}

// hitl runs n human-in-the-loop sessions one after the other and measures,
// for each, the time from just before SubmitToolResult to the model being
// entered for the next step. The wait for the run to suspend and to block
// in DBOS Recv is not part of a sample; the SQL profile sums what ran on
// the pool inside the samples.
func (h *harness) hitl(ctx context.Context, n int) (HITL, error) {
	samples := make([]hitlSample, 0, n)
	var sql sqlSnapshot
	last := time.Now()
	cpu0 := sampleCPU(ctx, h.pool)
	for i := range n {
		s, err := h.hitlSession(ctx, &sql)
		if err != nil {
			return HITL{}, fmt.Errorf("human-in-the-loop session %d of %d: %w", i+1, n, err)
		}
		samples = append(samples, s)
		if time.Since(last) >= 2*time.Second {
			last = time.Now()
			h.cfg.Progress(fmt.Sprintf("human in the loop: %d/%d sessions", i+1, n))
		}
	}
	cpu1 := sampleCPU(ctx, h.pool)
	pick := func(f func(hitlSample) time.Duration) []time.Duration {
		out := make([]time.Duration, len(samples))
		for i, s := range samples {
			out[i] = f(s)
		}
		return out
	}
	r := HITL{
		Sessions:         n,
		SubmitToNextStep: distribution(pick(func(s hitlSample) time.Duration { return s.toNextStep })),
		Submit:           distribution(pick(func(s hitlSample) time.Duration { return s.submit })),
		Resume:           distribution(pick(func(s hitlSample) time.Duration { return s.resume })),
		SQL:              profile(sqlSnapshot{}, sql, n, topStatements),
		CPU:              cpuProfile(cpu0, cpu1, n),
	}
	if h.cfg.KeepSamples {
		r.SamplesMS = make([]float64, n)
		for i, d := range pick(func(s hitlSample) time.Duration { return s.toNextStep }) {
			r.SamplesMS[i] = ms(d)
		}
	}
	return r, nil
}

// hitlSession runs one session to its suspension, answers it, and returns
// the sample once the session has completed; the statements run on the pool
// during the sample are added to sql.
func (h *harness) hitlSession(ctx context.Context, sql *sqlSnapshot) (hitlSample, error) {
	id := h.sessionID()
	t := newTrace(2)
	t.snaps = map[int]*sqlSnapshot{2: {}}
	h.script.add(id, t)
	hd, err := h.eng.Execute(ctx, h.hitlAgent, engine.Input{Message: "Ask the client."}, &engine.ExecuteOptions{SessionID: id})
	if err != nil {
		return hitlSample{}, err
	}

	// Not measured: the run suspends (Result returns at once then) and its
	// workflow blocks in DBOS Recv.
	sctx, cancel := context.WithTimeout(ctx, hitlTimeout)
	defer cancel()
	res, err := hd.Result(sctx)
	if err != nil {
		return hitlSample{}, fmt.Errorf("wait for the suspension: %w", err)
	}
	if res.Status != helix.AgentSuspendedClientTool || res.Suspended == nil || !slices.Equal(res.Suspended.ToolCallIDs, []string{hitlCallID}) {
		return hitlSample{}, fmt.Errorf("session %s ended %s (%s), want suspended on tool call %s", id, res.Status, res.Error, hitlCallID)
	}
	if err := h.awaitRecv(sctx, hd.WorkflowID); err != nil {
		return hitlSample{}, err
	}
	sub, err := helix.ClientToolResult(hitlCallID, clientAnswer{Answer: "yes"})
	if err != nil {
		return hitlSample{}, err
	}

	before := h.tracer.snapshot()
	t0 := time.Now()
	sr, err := h.eng.SubmitToolResult(ctx, id, sub)
	submitted := time.Now()
	if err != nil {
		return hitlSample{}, err
	}
	if sr.AlreadyCompleted || sr.RunID != hd.RunID || len(sr.Remaining) > 0 {
		return hitlSample{}, fmt.Errorf("session %s: submission %+v, want delivered to run %s with nothing remaining", id, sr, hd.RunID)
	}

	// Not measured: the run completes.
	select {
	case <-t.done:
	case <-ctx.Done():
		return hitlSample{}, ctx.Err()
	case <-time.After(hitlTimeout):
		return hitlSample{}, fmt.Errorf("session %s: the model was not called for step 2 within %s of the submission (lost wake-up?)", id, hitlTimeout)
	}
	cctx, cancel := context.WithTimeout(ctx, hitlTimeout)
	defer cancel()
	if res, err = hd.Result(cctx); err != nil {
		return hitlSample{}, err
	}
	if res.Status != helix.AgentCompleted {
		return hitlSample{}, fmt.Errorf("session %s ended %s: %s (%s)", id, res.Status, res.Error, res.ErrorCode)
	}
	st, err := hd.State(ctx)
	if err != nil {
		return hitlSample{}, err
	}
	if st.StepCount != 2 || len(st.PendingClientToolCalls) > 0 {
		return hitlSample{}, fmt.Errorf("session %s committed %d steps with %d calls pending, want 2 steps and none", id, st.StepCount, len(st.PendingClientToolCalls))
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.err != nil:
		return hitlSample{}, t.err
	case t.repeat > 0:
		return hitlSample{}, fmt.Errorf("session %s: %d model calls repeated a step: the session was replayed", id, t.repeat)
	}
	sql.add(before, *t.snaps[2])
	entered := t.enter[2]
	return hitlSample{toNextStep: entered.Sub(t0), submit: submitted.Sub(t0), resume: entered.Sub(submitted)}, nil
}

// awaitRecv returns once the run waits for the call's answer (it watches
// the call's NOTIFY), so the submission that follows wakes a waiting run
// rather than being found by the wait's first look.
func (h *harness) awaitRecv(ctx context.Context, workflowID string) error {
	wait := 500 * time.Microsecond
	for !h.eng.WaitsForAnswer(workflowID, hitlCallID) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("workflow %s never began to wait for tool call %s: %w", workflowID, hitlCallID, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(wait*2, 20*time.Millisecond)
	}
	return nil
}
