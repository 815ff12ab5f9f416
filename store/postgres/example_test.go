package postgres_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	helix "github.com/helix-agents/helix-dbos"
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
