package engine_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

// An application creates a support ticket and the agent session that
// triages it in one transaction of its own: both commit, or neither does.
// The run starts only after the commit, on any launched engine that
// registers the agent (a web handler without an engine uses
// Client.ExecuteTx the same way).
func ExampleEngine_ExecuteTx() {
	ctx := context.Background()
	url := pgtest.ExampleURL()
	eng, err := engine.New(ctx, engine.Config{DatabaseURL: url})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = eng.Shutdown(ctx) }()
	triage := &helix.Agent{
		Name:         "triage",
		SystemPrompt: "Triage the support ticket.",
		Model:        scripted.New(scripted.Step{Text: "Priority: high."}),
	}
	if err := eng.Register(triage); err != nil {
		fmt.Println(err)
		return
	}
	if err := eng.Launch(ctx); err != nil {
		fmt.Println(err)
		return
	}
	app, err := pgxpool.New(ctx, url) // the application's own pool, on the same database
	if err != nil {
		fmt.Println(err)
		return
	}
	defer app.Close()
	if _, err := app.Exec(ctx, `CREATE TABLE tickets (id text PRIMARY KEY, subject text, session_id text)`); err != nil {
		fmt.Println(err)
		return
	}

	var pending *engine.PendingRun
	err = pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO tickets (id, subject, session_id) VALUES ('T-42', 'Printer on fire', 'ticket-T-42')`); err != nil {
			return err
		}
		var err error
		pending, err = eng.ExecuteTx(ctx, tx, triage, engine.Input{Message: "Printer on fire"},
			&engine.ExecuteOptions{SessionID: "ticket-T-42"})
		return err // an error rolls back the ticket and the session together
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	h, err := pending.Handle(ctx, eng) // committed: the run exists and starts
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := h.Result(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	var subject string
	if err := app.QueryRow(ctx, `SELECT subject FROM tickets WHERE session_id = $1`, res.SessionID).Scan(&subject); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(subject+":", res.Status, string(res.Output))
	// Output: Printer on fire: completed "Priority: high."
}
