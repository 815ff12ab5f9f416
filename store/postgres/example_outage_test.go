package postgres_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/helix-agents/helix-dbos/store/postgres"
)

// Read through a database restart or failover: WaitOut retries the read
// while it fails with a Transient error (logged by LogOutage), returns a
// statement's own error at once, and gives up when the context ends.
func ExampleWaitOut() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, os.Getenv("HELIX_DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	var n int
	err = postgres.WaitOut(ctx, func() error {
		return pool.QueryRow(ctx, `SELECT 40 + 2`).Scan(&n)
	}, postgres.LogOutage(zerolog.New(os.Stderr), "order-42", "read the order"))
	fmt.Println(n, err)

	err = postgres.WaitOut(ctx, func() error {
		_, err := pool.Exec(ctx, `SELECT 1/0`)
		return err
	}, nil)
	fmt.Println("transient:", postgres.Transient(err))
	// Output:
	// 42 <nil>
	// transient: false
}
