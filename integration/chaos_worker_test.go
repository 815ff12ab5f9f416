package integration_test

// The process side of the chaos suite (chaos_test.go): the agents every
// worker registers, and the worker's loop.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
)

// chaosModeWorker runs a chaos worker: an engine with the chaos agents that
// starts the sessions the parent requests (chaos_requests) until killed.
const chaosModeWorker = "chaos-worker"

// The kinds of chaos sessions: the agent each runs.
const (
	chaosTools      = "chaos-tools"      // parallel tools, then one more
	chaosHITL       = "chaos-hitl"       // a client tool, an approval and a server tool in one step
	chaosLead       = "chaos-lead"       // delegates to a sub-agent, which waits for an approval
	chaosCompanions = "chaos-companions" // spawns a persistent companion and consults it again
	chaosRefunds    = "chaos-refunds"    // a transactional tool: parallel refunds, then one more
)

var chaosKinds = []string{chaosTools, chaosHITL, chaosLead, chaosCompanions, chaosRefunds}

// chaosSchema: the requests the parent makes and the workers claim, one
// row per tool execution (no uniqueness: the test counts), and the
// refunds the transactional tool writes: UNIQUE on the effect's identity
// and written with no ON CONFLICT, so a refund written twice is a unique
// violation the model would see, never a silent no-op.
const chaosSchema = `
CREATE TABLE chaos_requests (
	session_id text PRIMARY KEY,
	kind       text NOT NULL,
	claimed_by text,
	started    boolean NOT NULL DEFAULT false
);
CREATE TABLE chaos_tool_runs (
	key          text NOT NULL, -- ToolContext.IdempotencyKey()
	session_id   text NOT NULL,
	tool_call_id text NOT NULL,
	phase        text NOT NULL, -- 'start' when the body begins, 'done' when its effect is complete
	worker       text NOT NULL,
	-- toolRun's marks: the worker's clock when the body reached the mark
	at           timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE chaos_refunds (
	session_id text NOT NULL,
	call_id    text NOT NULL,
	order_id   text NOT NULL,
	amount     int  NOT NULL,
	worker     text NOT NULL,
	UNIQUE (session_id, call_id)
);`

// chaosRig is a worker's view: its pool and executor ID.
type chaosRig struct {
	pool   *pgxpool.Pool
	worker string
}

// work pauses for a random 20–200 ms: the latency of a model or a tool, so
// that kills land in the middle of calls.
func work(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Duration(20+rand.IntN(180)) * time.Millisecond):
		return nil
	}
}

// chaosModel plays script by the number of assistant messages (so a
// re-executed call plays the same step), streaming its text in three
// deltas with a pause after the first.
func chaosModel(script func(step int, req helix.ModelRequest) helix.StepResult) helix.Model {
	return helix.ModelFunc(func(ctx context.Context, req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
		step := 1
		for _, m := range req.Messages {
			if m.Role == helix.RoleAssistant {
				step++
			}
		}
		res := script(step, req)
		text := res.Content
		third := len(text) / 3
		for i, d := range []string{text[:third], text[third : 2*third], text[2*third:]} {
			cb.TextDelta(d)
			if i == 0 {
				if err := work(ctx); err != nil {
					return helix.StepResult{}, err
				}
			}
		}
		return res, nil
	})
}

func toolStep(content string, calls ...helix.ToolCall) helix.StepResult {
	return helix.StepResult{Type: helix.StepToolCalls, StopReason: helix.StopToolUse, Content: content, ToolCalls: calls}
}

func textStep(content string) helix.StepResult {
	return helix.StepResult{Type: helix.StepText, StopReason: helix.StopEndTurn, Content: content}
}

func chaosCall(id, name, args string) helix.ToolCall {
	return helix.ToolCall{ID: id, Name: name, Arguments: json.RawMessage(args)}
}

// agents returns the chaos agents by kind (sub-agents and companions are
// registered through their parents).
func (r *chaosRig) agents() map[string]*helix.Agent {
	type recordIn struct {
		Item string `json:"item"`
	}
	record := func() *helix.Tool {
		return helix.MustNewTool("record", "Record an item durably", func(ctx context.Context, in recordIn, tc helix.ToolContext) (map[string]string, error) {
			if err := r.toolRun(ctx, tc, "start"); err != nil {
				return nil, err
			}
			if err := work(ctx); err != nil {
				return nil, err
			}
			if err := r.toolRun(ctx, tc, "done"); err != nil {
				return nil, err
			}
			return map[string]string{"recorded": in.Item}, nil
		})
	}
	type transferIn struct {
		Amount int `json:"amount"`
	}
	transfer := helix.MustNewTool("transfer", "Move money", func(ctx context.Context, in transferIn, tc helix.ToolContext) (map[string]int, error) {
		if err := r.toolRun(ctx, tc, "start"); err != nil {
			return nil, err
		}
		if err := r.toolRun(ctx, tc, "done"); err != nil {
			return nil, err
		}
		return map[string]int{"sent": in.Amount}, nil
	}, helix.RequireApproval())
	type question struct {
		Question string `json:"question"`
	}
	type answer struct {
		Answer string `json:"answer"`
	}
	type refundIn struct {
		Order  string `json:"order"`
		Amount int    `json:"amount"`
	}
	// refund is transactional: its row (and its 'done' mark) commit with
	// the call's record or not at all. Its 'start' mark is written on the
	// rig's own pool, outside the transaction, so that every attempt is
	// counted, the rolled-back ones too. The pause inside the transaction
	// is there for the kills to land in it.
	refund := helix.MustNewTxTool("refund", "Refund an order", func(ctx context.Context, tx pgx.Tx, in refundIn, tc helix.ToolContext) (map[string]any, error) {
		if err := r.toolRun(ctx, tc, "start"); err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO chaos_refunds (session_id, call_id, order_id, amount, worker) VALUES ($1, $2, $3, $4, $5)`,
			tc.SessionID(), tc.ToolCallID(), in.Order, in.Amount, r.worker); err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO chaos_tool_runs (key, session_id, tool_call_id, phase, worker) VALUES ($1, $2, $3, 'done', $4)`,
			tc.IdempotencyKey(), tc.SessionID(), tc.ToolCallID(), r.worker); err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_sleep($1)`, float64(20+rand.IntN(70))/1000); err != nil {
			return nil, err
		}
		return map[string]any{"refunded": in.Order, "amount": in.Amount}, nil
	})
	ask := helix.MustNewClientTool[question, answer]("ask_user", "Ask the user a question")
	schema := json.RawMessage(`{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}`)
	finish := func(id, answer string) helix.StepResult {
		out, _ := json.Marshal(map[string]string{"answer": answer})
		return toolStep("finishing", helix.ToolCall{ID: id, Name: helix.FinishToolName, Arguments: out})
	}

	tools := &helix.Agent{Name: chaosTools, Tools: []*helix.Tool{record()}, Model: chaosModel(func(step int, _ helix.ModelRequest) helix.StepResult {
		switch step {
		case 1:
			return toolStep("Recording alpha and beta.", chaosCall("t-a", "record", `{"item":"alpha"}`), chaosCall("t-b", "record", `{"item":"beta"}`))
		case 2:
			return toolStep("Now gamma.", chaosCall("t-c", "record", `{"item":"gamma"}`))
		}
		return textStep("All three are recorded.")
	})}
	hitl := &helix.Agent{Name: chaosHITL, Tools: []*helix.Tool{ask, transfer, record()}, Model: chaosModel(func(step int, _ helix.ModelRequest) helix.StepResult {
		if step == 1 {
			return toolStep("Asking, paying and noting.", chaosCall("h-ask", "ask_user", `{"question":"go?"}`),
				chaosCall("h-pay", "transfer", `{"amount":5}`), chaosCall("h-note", "record", `{"item":"note"}`))
		}
		return textStep("Asked, paid and noted.")
	})}
	// The helper's approval is nested human in the loop: the lead waits for
	// the helper, which waits for a person (both hibernate).
	helper := &helix.Agent{Name: "chaos-helper", OutputSchema: schema, Tools: []*helix.Tool{record(), transfer},
		Model: chaosModel(func(step int, _ helix.ModelRequest) helix.StepResult {
			if step == 1 {
				return toolStep("Helping.", chaosCall("s-rec", "record", `{"item":"delegated"}`), chaosCall("s-pay", "transfer", `{"amount":3}`))
			}
			return finish("s-fin", "helped")
		})}
	lead := &helix.Agent{Name: chaosLead, Tools: []*helix.Tool{helix.MustSubAgentTool(helper, nil, nil)},
		Model: chaosModel(func(step int, _ helix.ModelRequest) helix.StepResult {
			if step == 1 {
				return toolStep("Delegating.", chaosCall("l-sub", helix.SubAgentToolPrefix+"chaos-helper", `{"task":"help"}`))
			}
			return textStep("The helper helped.")
		})}
	scribe := &helix.Agent{Name: "chaos-scribe", OutputSchema: schema, Model: chaosModel(func(step int, req helix.ModelRequest) helix.StepResult {
		n := 0
		for _, m := range req.Messages {
			if m.Role == helix.RoleUser {
				n++
			}
		}
		return finish(fmt.Sprintf("w-fin-%d", step), fmt.Sprintf("read %d", n))
	})}
	companions := &helix.Agent{Name: chaosCompanions, PersistentAgents: []helix.PersistentAgent{{Agent: scribe}},
		Model: chaosModel(func(step int, _ helix.ModelRequest) helix.StepResult {
			switch step {
			case 1:
				return toolStep("Spawning the scribe.", chaosCall("p-spawn", helix.CompanionSpawnAgent,
					`{"agentType":"chaos-scribe","name":"scribe","message":"draft"}`))
			case 2:
				return toolStep("Consulting it again.", chaosCall("p-send", helix.CompanionSendMessage, `{"name":"scribe","message":"revise"}`))
			}
			return textStep("The scribe drafted and revised.")
		})}
	refunds := &helix.Agent{Name: chaosRefunds, Tools: []*helix.Tool{refund}, Model: chaosModel(func(step int, _ helix.ModelRequest) helix.StepResult {
		switch step {
		case 1:
			return toolStep("Refunding two orders.", chaosCall("r-a", "refund", `{"order":"A-1","amount":10}`),
				chaosCall("r-b", "refund", `{"order":"B-2","amount":20}`))
		case 2:
			return toolStep("And the third.", chaosCall("r-c", "refund", `{"order":"C-3","amount":30}`))
		}
		return textStep("Three orders are refunded.")
	})}
	return map[string]*helix.Agent{chaosTools: tools, chaosHITL: hitl, chaosLead: lead, chaosCompanions: companions, chaosRefunds: refunds}
}

// toolRun records a tool execution's phase, at the time the body reached
// it (the worker's clock, read first: a worker frozen while the mark's
// insert is in flight, its body begun before the freeze, must not read as
// a body that began after the thaw). Like any tool with a dependency that
// can restart, it retries until the write succeeds (the chaos restarts the
// very Postgres it writes to): a tool's error is its result, which the
// model would see.
func (r *chaosRig) toolRun(ctx context.Context, tc helix.ToolContext, phase string) error {
	at := time.Now()
	return retryReads(ctx, func() error {
		_, err := r.pool.Exec(ctx, `INSERT INTO chaos_tool_runs (key, session_id, tool_call_id, phase, worker, at) VALUES ($1, $2, $3, $4, $5, $6)`,
			tc.IdempotencyKey(), tc.SessionID(), tc.ToolCallID(), phase, r.worker, at)
		return err
	})
}

// runChaosWorker launches an engine as executor id and starts the sessions
// it claims, until it is killed (or its stdin closes).
func runChaosWorker(ctx context.Context, url, id string, lease time.Duration, log zerolog.Logger) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	rig := &chaosRig{pool: pool, worker: id}
	agents := rig.agents()
	cfg := engine.Config{DatabaseURL: url, ExecutorID: id, ExecutorLease: lease, Logger: &log, ShutdownTimeout: 2 * time.Second,
		HibernateAfter: chaosHibernateAfter}
	if os.Getenv(chaosEnvQueued) == "1" {
		cfg.Queue = &engine.QueueConfig{WorkerConcurrency: 8, PollingInterval: 50 * time.Millisecond}
	}
	e, err := engine.New(ctx, cfg)
	if err != nil {
		return err
	}
	for _, a := range agents {
		if err := e.Register(a); err != nil {
			return err
		}
	}
	if err := e.Launch(ctx); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "chaos worker %s launched\n", id)
	for {
		if err := rig.startOne(ctx, e, agents); err != nil {
			// Postgres restarting, most likely: the claim stays ours and
			// is tried again.
			log.Warn().Err(err).Msg("chaos worker: starting a session failed; retrying")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(30 * time.Millisecond):
		}
	}
}

// startOne starts the session this worker claimed (a claim survives a
// failed attempt), or claims the next requested one. A session that exists
// already was started by a worker that died before marking it: it is only
// marked.
func (r *chaosRig) startOne(ctx context.Context, e *engine.Engine, agents map[string]*helix.Agent) error {
	var sid, kind string
	err := r.pool.QueryRow(ctx, `
WITH mine AS (SELECT session_id, kind FROM chaos_requests WHERE claimed_by = $1 AND NOT started LIMIT 1),
claimed AS (
	UPDATE chaos_requests SET claimed_by = $1 WHERE session_id = (
		SELECT session_id FROM chaos_requests WHERE claimed_by IS NULL AND NOT started AND NOT EXISTS (SELECT 1 FROM mine)
		ORDER BY session_id LIMIT 1 FOR UPDATE SKIP LOCKED)
	RETURNING session_id, kind)
SELECT session_id, kind FROM mine UNION ALL SELECT session_id, kind FROM claimed`, r.worker).Scan(&sid, &kind)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	var exists bool
	if err := r.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM helix.sessions WHERE session_id = $1)`, sid).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := e.Execute(ctx, agents[kind], engine.Input{Message: "go"}, &engine.ExecuteOptions{SessionID: sid}); err != nil {
			return fmt.Errorf("start %s: %w", sid, err)
		}
	}
	_, err = r.pool.Exec(ctx, `UPDATE chaos_requests SET started = true WHERE session_id = $1`, sid)
	return err
}
