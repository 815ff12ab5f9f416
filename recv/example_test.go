package recv_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/helix-agents/helix-dbos/recv"
)

// Take the answer to a tool call in a transaction of your own, after
// checking that one waits (the agent loop does this in the transaction that
// records the call's outcome).
func ExampleConsume() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("HELIX_DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = conn.Close(ctx) }()
	there, err := recv.Waiting[pgx.Row](ctx, conn, "session-1-turn-1", "call-1")
	if err != nil || !there {
		fmt.Println(there, err)
		return
	}
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
	fmt.Println("took the answer:", took, tx.Commit(ctx))
}
