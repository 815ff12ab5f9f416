package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/scripted"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// researchAgentName is the durable identity of the demo agent: sessions
// store it as their agent type, and `resume` finds the agent by it.
const researchAgentName = "research-assistant"

// researchQuestion is the demo's user message.
const researchQuestion = "How does durable execution make LLM agents reliable?"

// The demo agent's tool names (durable identities, as every tool name).
const (
	toolSearchWeb  = "search_web"
	toolSearchDocs = "search_docs"
	toolSaveNote   = "save_note"
)

// researchOutputSchema is the structured output the agent delivers through
// __finish__.
const researchOutputSchema = `{
  "type": "object",
  "properties": {
    "answer":     {"type": "string", "minLength": 1},
    "key_points": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    "sources":    {"type": "array", "items": {"type": "string"}},
    "confidence": {"type": "number", "minimum": 0, "maximum": 1}
  },
  "required": ["answer", "key_points", "sources", "confidence"],
  "additionalProperties": false
}`

// researchState is the agent's custom state. Both tools of step 1 run in
// parallel and append to Sources: appends compose (a replace would be
// last-write-wins).
type researchState struct {
	Sources []string `json:"sources"`
	Notes   []string `json:"notes"`
}

// The scripted answers, one per step. Step 2's text is long enough for the
// crash demo to kill the worker half-way through it.
const (
	step1Text = "I'll research this from two angles at once: the web and the DBOS documentation."
	step2Text = "Both sources agree: every model call and every tool call is checkpointed in Postgres, " +
		"so a process that dies is replaced by one that resumes from the last completed step " +
		"instead of starting over, and a tool that already ran is not run again. Let me note that."
	step3Text = "Writing up the answer."
)

// researchOpts tune the demo agent.
type researchOpts struct {
	// delay is the pause between streamed words (and a tool's running
	// time is a few of them), so the stream looks live.
	delay time.Duration
	// rec records model calls and tool executions; nil records nothing.
	rec *recorder
	// stallStep makes the model hang half-way through that step's answer
	// until its context ends, as a slow provider would: the crash demo's
	// worker is killed there. 0 never stalls.
	stallStep int
	// beforeStep, when set, runs before each model step (tests use it to
	// hold a run at a known point).
	beforeStep func(ctx context.Context, step int) error
}

// newResearchAgent returns the demo agent: step 1 calls search_web and
// search_docs in parallel (both append to the custom state), step 2
// streams an analysis and calls save_note, step 3 delivers a structured
// output through __finish__.
func newResearchAgent(o researchOpts) *helix.Agent {
	type query struct {
		Query string `json:"query" jsonschema:"description=What to search for"`
	}
	type hit struct {
		Title string `json:"title"`
		URL   string `json:"url"`
	}
	type hits struct {
		Results []hit `json:"results"`
	}
	search := func(name string, results []hit) *helix.Tool {
		return helix.MustNewTool(name, "Search and return matching documents",
			func(ctx context.Context, q query, tc helix.ToolContext) (hits, error) {
				if err := o.rec.record(ctx, tc.SessionID(), "tool", name, tc.Step(), tc.IdempotencyKey()); err != nil {
					return hits{}, err
				}
				if err := sleep(ctx, 4*o.delay); err != nil {
					return hits{}, err
				}
				err := helix.UpdateState(tc, func(s *researchState) error {
					for _, r := range results {
						s.Sources = append(s.Sources, r.URL)
					}
					return nil
				})
				return hits{Results: results}, err
			})
	}
	webSearch := search(toolSearchWeb, []hit{
		{Title: "Durable execution for AI agents", URL: "https://example.org/blog/durable-agents"},
		{Title: "Why agents fail in production", URL: "https://example.org/blog/agent-failures"},
	})
	docsSearch := search(toolSearchDocs, []hit{
		{Title: "Workflow recovery", URL: "https://example.org/docs/workflow-recovery"},
	})
	type note struct {
		Note string `json:"note" jsonschema:"description=The note to keep"`
	}
	saveNote := helix.MustNewTool(toolSaveNote, "Keep a note in the session's state",
		func(ctx context.Context, n note, tc helix.ToolContext) (map[string]int, error) {
			if err := o.rec.record(ctx, tc.SessionID(), "tool", toolSaveNote, tc.Step(), tc.IdempotencyKey()); err != nil {
				return nil, err
			}
			var count int
			err := helix.UpdateState(tc, func(s *researchState) error {
				s.Notes = append(s.Notes, n.Note)
				count = len(s.Notes)
				return nil
			})
			return map[string]int{"notes": count}, err
		})

	// The script itself is llm/scripted's (text streamed word by word at
	// the demo's pace, tool calls, the structured output as __finish__);
	// this wrapper adds the demo's instrumentation: recording each model
	// call and stalling half-way through a step for the crash demo.
	script := scripted.Generate(func(index int, req helix.ModelRequest) (scripted.Step, error) {
		st, ok := researchScript(index, req)
		if !ok {
			return scripted.Step{}, fmt.Errorf("the research script has 3 steps, asked for step %d", index+1)
		}
		st.DeltaDelay = o.delay
		return st, nil
	})
	model := helix.ModelFunc(func(ctx context.Context, req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
		if o.beforeStep != nil {
			if err := o.beforeStep(ctx, req.Step); err != nil {
				return helix.StepResult{}, err
			}
		}
		if err := o.rec.record(ctx, req.AgentID, "model", fmt.Sprintf("step %d", req.Step), req.Step, ""); err != nil {
			return helix.StepResult{}, err
		}
		if o.stallStep == req.Step && req.Step <= len(stepTexts) {
			cb = stallHalfway(ctx, cb, len(scripted.SplitWords(stepTexts[req.Step-1])))
		}
		return script.GenerateStep(ctx, req, cb)
	})

	return &helix.Agent{
		Name:         researchAgentName,
		Description:  "The demo's scripted research agent",
		SystemPrompt: "You are a careful research assistant. Search, take notes, then answer with the required structure.",
		Model:        model,
		Tools:        []*helix.Tool{webSearch, docsSearch, saveNote},
		OutputSchema: json.RawMessage(researchOutputSchema),
		InitialState: json.RawMessage(`{"sources":[],"notes":[]}`),
		MaxSteps:     5,
	}
}

// stepTexts are the assistant texts of the three steps.
var stepTexts = [...]string{step1Text, step2Text, step3Text}

// researchScript returns step index (0-based) of the demo's script. It
// depends only on the request, so a step re-executed after a crash plays
// the same.
func researchScript(index int, req helix.ModelRequest) (scripted.Step, bool) {
	switch index {
	case 0:
		return scripted.Step{Text: step1Text, ToolCalls: []scripted.Call{
			{ID: "call_web", Name: toolSearchWeb, Args: map[string]string{"query": "durable execution for LLM agents"}},
			{ID: "call_docs", Name: toolSearchDocs, Args: map[string]string{"query": "workflow recovery after a crash"}},
		}}, true
	case 1:
		return scripted.Step{Text: step2Text, ToolCalls: []scripted.Call{
			{ID: "call_note", Name: toolSaveNote, Args: map[string]string{"note": "Checkpoint every model and tool call; resume from the last completed step."}},
		}}, true
	case 2:
		// The answer cites what the searches returned, read back from the
		// conversation as a real model would.
		var sources []string
		for _, m := range req.Messages {
			if m.Role != helix.RoleTool || (m.ToolName != toolSearchWeb && m.ToolName != toolSearchDocs) {
				continue
			}
			var h struct {
				Results []struct {
					URL string `json:"url"`
				} `json:"results"`
			}
			if json.Unmarshal([]byte(m.Content), &h) == nil {
				for _, r := range h.Results {
					sources = append(sources, r.URL)
				}
			}
		}
		slices.Sort(sources)
		return scripted.Step{Text: step3Text, Output: map[string]any{
			"answer": "Durable execution checkpoints every model call, tool call and step commit in Postgres, " +
				"so an agent interrupted by a crash resumes from its last completed step without redoing finished work.",
			"key_points": []string{
				"Each step's model and tool results are recorded before the next step starts.",
				"A replacement process recovers the pending run and continues it.",
				"Completed tool calls are not executed again; the live stream resyncs.",
			},
			"sources":    sources,
			"confidence": 0.9,
		}}, true
	}
	return scripted.Step{}, false
}

// stallHalfway returns callbacks that hang, like a slow provider, once half
// of a step's words have streamed, until ctx ends (the process is killed;
// bounded, so an orphaned worker cannot live forever).
func stallHalfway(ctx context.Context, cb helix.StreamCallbacks, words int) helix.StreamCallbacks {
	seen := 0
	inner := cb.OnTextDelta
	cb.OnTextDelta = func(d string) {
		if seen == words/2 {
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Minute):
			}
		}
		seen++
		if inner != nil {
			inner(d)
		}
	}
	return cb
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// recorder writes every model call and tool execution of the demo agent to
// the store's execution log (helix_demo.executions), outside the engine's
// transactions: it sees every attempt, including those lost in a crash,
// which is what proves that a completed tool never runs twice.
type recorder struct {
	pool *pgxpool.Pool
	log  *postgres.ExecutionLog
	pid  int
}

// newRecorder connects to the database and, when create is set, creates
// the log's table (idempotent, but not safe to run concurrently: one
// process runs it before any worker starts).
func newRecorder(ctx context.Context, dbURL string, create bool) (*recorder, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	log := postgres.NewExecutionLog(postgres.PgxQuerier(pool))
	if create {
		if err := log.Create(ctx); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return &recorder{pool: pool, log: log, pid: os.Getpid()}, nil
}

func (r *recorder) close() {
	if r != nil {
		r.pool.Close()
	}
}

func (r *recorder) record(ctx context.Context, sessionID, kind, name string, step int, key string) error {
	if r == nil {
		return nil
	}
	return r.log.Record(ctx, postgres.Execution{SessionID: sessionID, Kind: kind, Name: name, Step: step, Key: key, PID: r.pid})
}

// execution is one entry of the execution log.
type execution = postgres.Execution

func (r *recorder) executions(ctx context.Context, sessionID string) ([]execution, error) {
	return r.log.Executions(ctx, sessionID)
}
