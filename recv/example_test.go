package recv_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"

	helix "github.com/helix-agents/helix-dbos"
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

// Send the answer to a tool call in a transaction of your own, with its
// COMMIT in one round trip: the message commits with your records, once
// per key, and a workflow cancelled with DBOS's tools refuses it.
func ExampleSendStatement() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("HELIX_DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = conn.Close(ctx) }()
	sql, args, err := recv.SendStatement("session-1-turn-1", "call-1",
		recv.Message{Kind: recv.KindWake}, recv.WakeKey("call-1", "request-7"), true)
	if err != nil {
		fmt.Println(err)
		return
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(sql, args...)
	b.Queue("COMMIT")
	err = conn.SendBatch(ctx, b).Close()
	if recv.Cancelled(err) {
		_, _ = conn.Exec(ctx, "ROLLBACK")
		fmt.Println("the run's workflow was cancelled: nothing will take the message")
		return
	}
	fmt.Println("sent:", err)
}

// Build the message that carries an answer to its waiting run, for
// postgres.Store.SubmitAnswer, which records the answer and sends it in
// one statement: its topic, payload and key, given when it was recorded.
func ExampleAnswerMessage() {
	m, err := recv.AnswerMessage(helix.Approve("call-1", "looks right"))(1_800_000_000_000)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(m.Topic, m.Key)
	// Output: helix.tool_call:call-1 helix.submission:call-1
}
