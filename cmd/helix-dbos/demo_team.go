package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/llm/scripted"
	"github.com/helix-agents/helix-dbos/store"
)

// The team demo's agents (durable identities).
const (
	leadAgentName   = "editorial-lead"
	checkerName     = "fact-checker"
	editorName      = "editor"
	teamRequest     = "Prepare the report's headline and summary."
	checkedClaim    = "A crashed agent run resumes from its last completed step."
	editorTitle     = "Agents That Never Lose Work"
	editorFirstAsk  = "Suggest a title for a report on why durable execution makes LLM agents reliable."
	editorSecondAsk = "Now a one-line summary that fits your title."
	callConsult     = "call_consult_editor"
)

// newTeamAgent returns the team demo's lead: step 1 delegates a check to
// the fact-checker (a sub-agent: a child session whose chunks stream into
// the lead's), step 2 spawns the editor (a persistent companion with its
// own session), step 3 consults the editor again (the editor continues its
// session and remembers its title), step 4 answers.
func newTeamAgent(o researchOpts) *helix.Agent {
	schema := func(field string) json.RawMessage {
		return json.RawMessage(`{"type":"object","properties":{"` + field + `":{"type":"string","minLength":1}},"required":["` + field + `"]}`)
	}
	checker := &helix.Agent{
		Name:         checkerName,
		Description:  "Checks a claim against the documentation",
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"verdict":{"type":"string"},"evidence":{"type":"string"}},"required":["verdict","evidence"]}`),
		Model: scripted.New(scripted.Step{Text: "Checking the claim against the DBOS documentation.", DeltaDelay: o.delay,
			Output: map[string]string{"verdict": "supported",
				"evidence": "each step's outcome is checkpointed in Postgres before the next step starts"}}),
	}
	editor := &helix.Agent{
		Name:         editorName,
		Description:  "Writes titles and summaries, and remembers what it wrote",
		OutputSchema: schema("suggestion"),
		Model: scripted.Generate(func(index int, req helix.ModelRequest) (scripted.Step, error) {
			switch index {
			case 0:
				return scripted.Step{Text: "A title that says what the reader gains.", DeltaDelay: o.delay,
					Output: map[string]string{"suggestion": editorTitle}}, nil
			case 1:
				// The editor's own memory: the title it gave in its
				// first consultation, read back from its session.
				title := ""
				for _, m := range req.Messages {
					for _, c := range m.ToolCalls {
						var out struct{ Suggestion string }
						if c.Name == helix.FinishToolName && json.Unmarshal(c.Arguments, &out) == nil {
							title = out.Suggestion
						}
					}
				}
				if title == "" {
					return scripted.Step{}, fmt.Errorf("the editor does not remember its title")
				}
				return scripted.Step{Text: "Building on my title.", DeltaDelay: o.delay, Output: map[string]string{
					"suggestion": "“" + title + "”: every step is checkpointed in Postgres, so a crash costs no work."}}, nil
			}
			return scripted.Step{}, fmt.Errorf("the editor's script has 2 steps, asked for step %d", index+1)
		}),
	}
	lead := scripted.Generate(func(index int, req helix.ModelRequest) (scripted.Step, error) {
		switch index {
		case 0:
			return scripted.Step{Text: "First the fact-checker verifies the central claim.", DeltaDelay: o.delay,
				ToolCalls: []scripted.Call{{ID: "call_check", Name: helix.SubAgentToolPrefix + checkerName, Args: map[string]string{"task": checkedClaim}}}}, nil
		case 1:
			return scripted.Step{Text: "Verified. Now the editor, a persistent companion, suggests a title.", DeltaDelay: o.delay,
				ToolCalls: []scripted.Call{{ID: "call_spawn_editor", Name: helix.CompanionSpawnAgent,
					Args: map[string]string{"agentType": editorName, "name": editorName, "message": editorFirstAsk}}}}, nil
		case 2:
			return scripted.Step{Text: "Good. I consult the editor again: it continues its own session.", DeltaDelay: o.delay,
				ToolCalls: []scripted.Call{{ID: callConsult, Name: helix.CompanionSendMessage,
					Args: map[string]string{"name": editorName, "message": editorSecondAsk}}}}, nil
		case 3:
			var summary struct{ Suggestion string }
			for _, m := range req.Messages {
				if m.Role == helix.RoleTool && m.ToolCallID == callConsult {
					if err := json.Unmarshal([]byte(m.Content), &summary); err != nil {
						return scripted.Step{}, fmt.Errorf("the editor's summary: %w", err)
					}
				}
			}
			return scripted.Step{Text: "Headline and summary: " + summary.Suggestion, DeltaDelay: o.delay}, nil
		}
		return scripted.Step{}, fmt.Errorf("the lead's script has 4 steps, asked for step %d", index+1)
	})
	return &helix.Agent{
		Name:             leadAgentName,
		Description:      "The demo's scripted editorial lead: delegates a check, consults an editor twice",
		SystemPrompt:     "You lead a small editorial team: a fact-checker and an editor.",
		Model:            lead,
		Tools:            []*helix.Tool{helix.MustSubAgentTool(checker, nil, nil)},
		PersistentAgents: []helix.PersistentAgent{{Agent: editor}},
		MaxSteps:         6,
	}
}

// phase4 runs the team: the lead's stream shows the fact-checker's chunks
// between subagent_start and subagent_end; the editor answers twice from
// one session, the second time as a continuation with its memory.
func (d *demo) phase4(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, demoPhaseTimeout)
	defer cancel()
	sessionID := "demo-" + d.id + "-d"
	d.phase("phase 4: a lead delegates to a sub-agent and consults a persistent companion twice (session %s)", sessionID)
	d.say("agent %s: step 1 delegates to %s (a child workflow, its chunks in this stream),", leadAgentName, checkerName)
	d.say("steps 2 and 3 consult %s, a persistent companion: the second consultation continues its session", editorName)
	agent := newTeamAgent(researchOpts{delay: d.delay})
	e, stop, err := d.newEngine(ctx, "helix-demo-team-"+d.id, agent)
	if err != nil {
		return err
	}
	defer stop()
	h, err := e.Execute(ctx, agent, engine.Input{Message: teamRequest}, &engine.ExecuteOptions{SessionID: sessionID})
	if err != nil {
		return err
	}
	d.say("user: %s", teamRequest)
	d.say("live stream (sequence, chunk type, agent, detail):")
	p := *d.p
	p.showAgent, p.session = true, sessionID
	for c, err := range h.Stream(ctx) {
		if err != nil {
			return err
		}
		p.chunk(c)
	}
	p.endLine()
	res, err := h.Result(ctx)
	if err != nil {
		return err
	}
	// The checks behind exit status 0, from the tables: the sub-agent's
	// session completed; the editor has one session with two runs (the
	// second a continuation with a deterministic workflow ID), each
	// consultation in its log once, and its second answer used its memory.
	var problems []string
	if res.Status != helix.AgentCompleted {
		problems = append(problems, fmt.Sprintf("the lead ended %s (%s), want completed", res.Status, res.Error))
	}
	refs, err := d.st.GetSubSessionRefs(ctx, sessionID)
	if err != nil {
		return err
	}
	editorID := sessionID + "-agent-" + editorName
	for _, r := range refs {
		if !r.Status.Final() || r.Status != helix.SubSessionCompleted {
			problems = append(problems, fmt.Sprintf("child %s is %s, want completed", r.SubSessionID, r.Status))
		}
	}
	if len(refs) != 2 {
		problems = append(problems, fmt.Sprintf("the lead has %d children, want 2 (the fact-checker and the editor)", len(refs)))
	}
	runs, err := d.st.ListRuns(ctx, editorID)
	if err != nil {
		return err
	}
	var workflows []string
	for _, r := range runs {
		workflows = append(workflows, strings.TrimPrefix(r.WorkflowID, editorID))
	}
	if want := []string{"-turn-1", "-continue-" + callConsult}; strings.Join(workflows, ",") != strings.Join(want, ",") {
		problems = append(problems, fmt.Sprintf("the editor's runs have workflows %v, want %v", workflows, want))
	}
	page, err := d.st.GetMessages(ctx, editorID, nil)
	if err != nil {
		return err
	}
	asks := map[string]int{}
	for _, m := range page.Messages {
		if m.Role == helix.RoleUser {
			asks[m.Content]++
		}
	}
	if asks[editorFirstAsk] != 1 || asks[editorSecondAsk] != 1 || len(asks) != 2 {
		problems = append(problems, fmt.Sprintf("the editor's log has the consultations %v, want each once", asks))
	}
	lead, err := d.st.GetMessages(ctx, sessionID, &store.GetMessagesOptions{Limit: store.MaxPageSize})
	if err != nil {
		return err
	}
	if answer := lead.Messages[len(lead.Messages)-1].Content; !strings.Contains(answer, editorTitle) {
		problems = append(problems, fmt.Sprintf("the answer %q lacks the editor's title: its memory was lost", answer))
	}
	if len(problems) > 0 {
		return fmt.Errorf("demo check failed: %s", strings.Join(problems, "; "))
	}
	d.say("the editor's own stream (a companion outlives the lead's turn, so it does not write into the lead's):")
	ep := *d.p
	ep.showAgent, ep.session = true, editorID
	chunks, err := d.st.ReadChunks(ctx, editorID, 0, 500)
	if err != nil {
		return err
	}
	for _, c := range chunks {
		switch c.Chunk.(type) {
		case *helix.TextDeltaChunk, *helix.OutputChunk, *helix.StepCommittedChunk:
			ep.chunk(c)
		}
	}
	ep.endLine()
	d.say("✓ %s ran as child session %s and completed", checkerName, shortID(sessionID+"-sub-call_check"))
	d.say("✓ %s: one session (%s), two runs (workflows …%s and …%s), each consultation in its log once;",
		editorName, editorID, workflows[0], workflows[1])
	d.say("  the second answer builds on the title from the first: the session kept its memory")
	return nil
}
