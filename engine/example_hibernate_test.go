package engine_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

// A run that waits for an approval longer than Config.HibernateAfter
// hibernates: its workflow ends, and nothing of it stays in the process.
// The approval, given whenever and from whichever process, wakes it in a
// continuation that finishes the step.
func ExampleConfig_hibernateAfter() {
	ctx := context.Background()
	eng, err := engine.New(ctx, engine.Config{DatabaseURL: pgtest.ExampleURL(), HibernateAfter: 100 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = eng.Shutdown(ctx) }()
	type refundIn struct {
		Order string `json:"order"`
	}
	refund := helix.MustNewTool("refund", "Refund an order", func(_ context.Context, in refundIn, _ helix.ToolContext) (string, error) {
		return "refunded " + in.Order, nil
	}, helix.RequireApproval())
	support := &helix.Agent{
		Name:  "support-hibernating",
		Tools: []*helix.Tool{refund},
		Model: scripted.New(
			scripted.Step{ToolCalls: []scripted.Call{{ID: "call-1", Name: "refund", Args: refundIn{Order: "A-17"}}}},
			scripted.Step{Text: "Order A-17 is refunded."},
		),
	}
	if err := eng.Register(support); err != nil {
		fmt.Println(err)
		return
	}
	if err := eng.Launch(ctx); err != nil {
		fmt.Println(err)
		return
	}
	h, err := eng.Execute(ctx, support, engine.Input{Message: "Refund A-17"}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	// The run's workflow ends when the run hibernates (an app never needs
	// to wait for it: answers are taken either way).
	wf, err := dbos.RetrieveWorkflow[any](eng.DBOS(), h.WorkflowID)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := wf.GetResult(); err != nil {
		fmt.Println(err)
		return
	}
	run, err := eng.RunInfo(ctx, h.RunID)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("hibernated:", run.HibernatedAt != nil, run.Status)
	if _, err := eng.SubmitToolResult(ctx, h.SessionID, helix.Approve("call-1", "ok")); err != nil {
		fmt.Println(err)
		return
	}
	res, err := h.Await(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	if run, err = eng.RunInfo(ctx, h.RunID); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Status, "after", run.Wakes, "wake")
	// Output:
	// hibernated: true suspended_client_tool
	// completed after 1 wake
}
