package postgres_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/recv"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// Wait for a NOTIFY on a channel of your own, re-reading what it is about
// on each wake-up (a notification is a hint: one sent while the store's
// listener reconnects is lost, and the wake-up after the reconnect covers
// it).
func ExampleStore_Watch() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("HELIX_DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	st, err := postgres.New(pool)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = st.Close() }()
	wake, stop, err := st.Watch("orders", "order-42")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	for {
		var shipped bool
		if err := pool.QueryRow(ctx, `SELECT shipped FROM orders WHERE id = 'order-42'`).Scan(&shipped); err != nil {
			fmt.Println(err)
			return
		}
		if shipped {
			fmt.Println("shipped")
			return
		}
		select {
		case <-wake: // NOTIFY orders, 'order-42'
		case <-time.After(5 * time.Second):
		}
	}
}

// Append chunks to a stream in the same round trip (and implicit
// transaction) as statements of your own.
func ExampleStore_QueueAppend() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("HELIX_DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	st, err := postgres.New(pool)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = st.Close() }()
	b := &pgx.Batch{}
	if err := st.QueueAppend(b, "session-1", []store.ChunkWrite{{Chunk: &helix.TextDeltaChunk{Delta: "hello"}}}); err != nil {
		fmt.Println(err)
		return
	}
	b.Queue(`UPDATE audit SET last_event = now() WHERE session_id = 'session-1'`)
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		fmt.Println(err)
	}
}

// Commit an agent step as one statement sent with the transaction's
// COMMIT, assuming what your last commit left (the message count, no
// interrupt requested), and again under the session's locks when the
// database refuses the assumption.
func ExampleCommitRefused() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("HELIX_DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	st, err := postgres.New(pool)
	if err != nil {
		fmt.Println(err)
		return
	}
	step := store.StepCommit{SessionID: "session-1", RunID: "run-1", Step: 3, StreamID: "session-1",
		Messages:           []helix.Message{helix.AssistantMessage("done")},
		ExpectMessageCount: 5}
	commit := func(ctx context.Context) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		pq := postgres.NewPipelined(tx)
		if _, err := st.WithQuerier(pq).CommitStep(ctx, step); err != nil {
			return err
		}
		if err := pq.Flush(ctx); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	err = commit(ctx)
	if postgres.CommitRefused(err) {
		err = commit(postgres.LockedCommit(ctx))
	}
	fmt.Println("committed:", err)
}

// Record an approval and send it to the waiting run in one statement when
// it takes the common path, and fall back to RecordSubmission (which
// reports why an answer is refused) when it does not.
func ExampleStore_SubmitAnswer() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("HELIX_DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	st, err := postgres.New(pool)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = st.Close() }()
	sub := helix.Approve("call-1", "looks right")
	rec, woke, ok, err := st.SubmitAnswer(ctx, "session-1", sub, recv.AnswerMessage(sub))
	switch {
	case err != nil:
		fmt.Println(err)
	case !ok:
		fmt.Println("not the common path: record it with RecordSubmission")
	default:
		if woke != nil { // a hibernated run: announce its wake once committed
			st.Announce(postgres.RunRecordedChannel, *woke)
		}
		fmt.Println("recorded; still waiting:", rec.Unresolved)
	}
}

// Look for the answer to a call a run waits for, as the run's execution
// (its workflow's owner token), and stop waiting when the run hibernated
// already: its continuation takes the answer.
func ExampleStore_PeekAnswer() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("HELIX_DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	st, err := postgres.New(pool)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = st.Close() }()
	w := postgres.Waiter{SessionID: "session-1", RunID: "run-1", WorkflowID: "session-1-turn-1",
		Self: "session-1-turn-1", Owner: "owner-token"}
	a, err := st.PeekAnswer(ctx, w, "call-1", recv.Topic("call-1"))
	switch {
	case err != nil:
		fmt.Println(err)
	case !a.Owned || a.Asleep:
		fmt.Println("not this execution's to take")
	case a.MessageWaiting:
		fmt.Println("answered: take it in a transaction")
	default:
		fmt.Println("still waiting")
	}
}

// Hold a stream append for a transaction that sends it with its own
// statements, in one round trip: the statement AppendHeld would defer.
func ExampleStore_HeldAppendStatement() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("HELIX_DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	st, err := postgres.New(pool)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = st.Close() }()
	sql, args, err := st.HeldAppendStatement("session-1", []store.ChunkWrite{{RunID: "run-1",
		Chunk: &helix.TextDeltaChunk{Base: helix.Base{AgentID: "session-1", AgentType: "support", Step: 1}, Delta: "hello"}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(sql, args...)
		b.Queue(`UPDATE orders SET greeted = true WHERE id = 'order-42'`)
		return tx.SendBatch(ctx, b).Close()
	})
	fmt.Println("committed:", err)
}

// A suspended step ID names its run and step; an ID of another form names
// none.
func ExampleSplitStepID() {
	fmt.Println(postgres.SplitStepID("01a229f0-cbd5-7e2f-8f2e-d6ab11b557c0:3"))
	fmt.Println(postgres.SplitStepID("step-2"))
	// Output:
	// 01a229f0-cbd5-7e2f-8f2e-d6ab11b557c0 3 true
	//  0 false
}
