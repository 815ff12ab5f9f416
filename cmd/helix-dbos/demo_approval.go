package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgprovision"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

// publisherAgentName is the durable identity of the approval demo's agent.
const publisherAgentName = "report-publisher"

// toolPublishReport is the approval-gated tool of the approval demo.
const toolPublishReport = "publish_report"

// The approval demo's script and the decision its second process sends.
const (
	reportTitle     = "How durable execution makes LLM agents reliable"
	publishRequest  = "Publish the research report."
	publishStepText = "The report is ready. Publishing makes it public, so I need your approval first."
	approvalReason  = "reviewed in the demo"
)

// newPublisherAgent returns the approval demo's agent: step 1 calls
// publish_report, which requires approval, so the run suspends until a
// person answers; step 2 reports what happened. o.rec records the tool's
// executions, to show it ran exactly once.
func newPublisherAgent(o researchOpts) *helix.Agent {
	type report struct {
		Title string `json:"title" jsonschema:"description=The report's title"`
	}
	type published struct {
		URL string `json:"url"`
	}
	publish := helix.MustNewTool(toolPublishReport, "Publish a report on the public site (requires approval)",
		func(ctx context.Context, r report, tc helix.ToolContext) (published, error) {
			if err := o.rec.record(ctx, tc.SessionID(), "tool", toolPublishReport, tc.Step(), tc.IdempotencyKey()); err != nil {
				return published{}, err
			}
			if err := sleep(ctx, 4*o.delay); err != nil {
				return published{}, err
			}
			return published{URL: "https://example.org/reports/" + slug(r.Title)}, nil
		}, helix.RequireApproval())

	script := scripted.Generate(func(index int, req helix.ModelRequest) (scripted.Step, error) {
		switch index {
		case 0:
			return scripted.Step{Text: publishStepText, DeltaDelay: o.delay, ToolCalls: []scripted.Call{
				{ID: "call_publish", Name: toolPublishReport, Args: map[string]string{"title": reportTitle}},
			}}, nil
		case 1:
			// Read the outcome back from the conversation, as a model would.
			text := "Understood: the report stays unpublished."
			for _, m := range req.Messages {
				var p published
				if m.Role == helix.RoleTool && m.ToolName == toolPublishReport && json.Unmarshal([]byte(m.Content), &p) == nil && p.URL != "" {
					text = "Published “" + reportTitle + "” at " + p.URL + "."
				}
			}
			return scripted.Step{Text: text, DeltaDelay: o.delay}, nil
		}
		return scripted.Step{}, fmt.Errorf("the publisher script has 2 steps, asked for step %d", index+1)
	})
	return &helix.Agent{
		Name:         publisherAgentName,
		Description:  "The demo's scripted publisher: publishing needs a person's approval",
		SystemPrompt: "You publish reports. Publishing requires the user's approval.",
		Model:        script,
		Tools:        []*helix.Tool{publish},
		MaxSteps:     4,
	}
}

// slug turns a title into a URL path segment.
func slug(title string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(title) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}

// phase3 runs the publisher: its run suspends on the approval, a second
// process (this binary, `helix-dbos approve`) answers, and the stream
// continues live here in the same run.
func (d *demo) phase3(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, demoPhaseTimeout)
	defer cancel()
	sessionID := "demo-" + d.id + "-c"
	d.phase("phase 3: a run waits for an approval given by another process (session %s)", sessionID)
	d.say("agent %s: step 1 calls %s, which requires approval: the run suspends durably until", publisherAgentName, toolPublishReport)
	d.say("a person answers; a second process (this binary, `helix-dbos approve`) approves, and the run continues in place")
	agent := newPublisherAgent(researchOpts{delay: d.delay, rec: d.rec})
	e, stop, err := d.newEngine(ctx, "helix-demo-approvals-"+d.id, agent)
	if err != nil {
		return err
	}
	defer stop()
	h, err := e.Execute(ctx, agent, engine.Input{Message: publishRequest}, &engine.ExecuteOptions{SessionID: sessionID})
	if err != nil {
		return err
	}
	d.say("user: %s", publishRequest)
	d.say("live stream:")
	approver := 0
	for c, err := range h.Stream(ctx) {
		if err != nil {
			return err
		}
		d.p.chunk(c)
		if req, ok := c.Chunk.(*helix.ToolApprovalRequestChunk); ok && approver == 0 {
			if approver, err = d.approveElsewhere(ctx, sessionID, h.RunID, req); err != nil {
				return err
			}
		}
	}
	if approver == 0 {
		return errors.New("the run ended without asking for approval")
	}
	res, err := h.Result(ctx)
	if err != nil {
		return err
	}
	// The checks behind exit status 0: the tool ran exactly once (the
	// recorder sees every execution, outside the engine), and the run that
	// suspended is the run that completed.
	xs, err := d.rec.executions(ctx, sessionID)
	if err != nil {
		return err
	}
	ran, ranIn := 0, 0
	for _, x := range xs {
		if x.Kind == "tool" && x.Name == toolPublishReport {
			ran, ranIn = ran+1, x.PID
		}
	}
	runs, err := d.st.ListRuns(ctx, sessionID)
	if err != nil {
		return err
	}
	var problems []string
	if res.Status != helix.AgentCompleted {
		problems = append(problems, fmt.Sprintf("the run ended %s (%s), want completed", res.Status, res.Error))
	}
	if ran != 1 {
		problems = append(problems, fmt.Sprintf("%s ran %d times, want exactly once", toolPublishReport, ran))
	}
	if len(runs) != 1 || runs[0].RunID != h.RunID {
		problems = append(problems, fmt.Sprintf("the session has %d run(s), want only run %s (the one that suspended)", len(runs), h.RunID))
	}
	if len(problems) > 0 {
		return fmt.Errorf("demo check failed: %s", strings.Join(problems, "; "))
	}
	d.say("✓ %s ran exactly once, in this process (pid %d), after the approval from pid %d;", toolPublishReport, ranIn, approver)
	d.say("  the run completed in place: run %s suspended, was answered and finished (the session's only run)", shortID(h.RunID))
	return nil
}

// approveElsewhere shows the suspended run, then approves its call from a
// second process and prints that process's output. It returns the
// process's pid.
func (d *demo) approveElsewhere(ctx context.Context, sessionID, runID string, req *helix.ToolApprovalRequestChunk) (int, error) {
	run, err := d.st.GetRun(ctx, runID)
	if err != nil {
		return 0, err
	}
	s, err := d.st.LoadState(ctx, sessionID)
	if err != nil {
		return 0, err
	}
	calls, err := d.st.ListPendingCalls(ctx, s.SessionID)
	if err != nil {
		return 0, err
	}
	d.p.line("⏸  run %s is %s: the pending call is recorded in Postgres, so any process can answer it", shortID(run.RunID), run.Status)
	d.p.line("   and a restart would lose nothing. `helix-dbos sessions show %s` lists it:", sessionID)
	printPending(d.out, d.p.prefix+"   ", s, calls)

	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("find this program to re-execute it: %w", err)
	}
	args := []string{"approve", sessionID, req.ToolCallID, "--reason", approvalReason}
	if d.g.cfg.Verbose {
		args = append(args, "--verbose")
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	// The URL goes through the environment, not the command line, which
	// other users of the machine can read.
	cmd.Env = append(os.Environ(), pgprovision.EnvDatabaseURL+"="+d.dbURL)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	// Shown as what it connects to: the URL's password stays out of the output.
	d.p.line("$ %s=%q helix-dbos approve %s %s --reason %q", pgprovision.EnvDatabaseURL, describeDatabase(d.dbURL), sessionID, req.ToolCallID, approvalReason)
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start the approving process: %w", err)
	}
	pid := cmd.Process.Pid
	err = cmd.Wait()
	d.p.line("  second process, pid %d (this binary, re-executed), printed:", pid)
	for _, l := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
		d.p.line("  │ %s", l)
	}
	if err != nil {
		return 0, fmt.Errorf("`helix-dbos approve` (pid %d) failed: %v", pid, err)
	}
	d.p.line("the approving process has exited; the stream continues live in this process (pid %d):", os.Getpid())
	return pid, nil
}
