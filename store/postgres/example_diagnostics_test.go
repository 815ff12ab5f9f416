package postgres_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/helix-agents/helix-dbos/store/postgres"
)

// An operator's tool reads the database through Diagnostics over one
// connection, each query bounded by its own context: here, whether an
// engine ever ran on the database, and the active sessions that wait for
// a person past their deadline.
func ExampleDiagnostics() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("HELIX_DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = conn.Close(ctx) }()
	d := postgres.NewDiagnostics(postgres.PgxQuerier(conn))
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	exist, err := d.RelationsExist(qctx, "helix.sessions", "dbos.workflow_status")
	if err != nil {
		fmt.Println(err)
		return
	}
	if !exist[0] || !exist[1] {
		fmt.Println("no engine has run here: migrate and launch one")
		return
	}
	active, err := d.ActiveSessions(qctx, time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range active {
		if s.OverdueCalls != "" {
			fmt.Printf("%s waits past the deadline of %s\n", s.SessionID, s.OverdueCalls)
		}
	}
}
