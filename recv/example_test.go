package recv_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/helix-agents/helix-dbos/recv"
)

// Take the answer to a tool call in a transaction of your own (the agent
// loop does this in the transaction that records the call's outcome, so
// the message is taken exactly when the outcome is recorded).
func ExampleConsume() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("HELIX_DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = conn.Close(ctx) }()
	tx, err := conn.Begin(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = tx.Rollback(ctx) }()
	took, err := recv.Consume[pgx.Row](ctx, tx, "session-1-turn-1", "call-1", 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("took an answer:", took, tx.Commit(ctx))
}
