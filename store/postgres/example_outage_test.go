package postgres_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"

	"github.com/helix-agents/helix-dbos/store/postgres"
)

// Ride out a database restart: WaitOut runs a read again while it fails
// with a Transient error (here the server's shutdown, twice, each retry
// logged by LogOutage), and returns a statement's own error at once.
func ExampleWaitOut() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shutdown := &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}
	tries := 0
	read := func() error { // a read of yours, e.g. pool.QueryRow(ctx, …).Scan(…)
		if tries++; tries <= 2 {
			return shutdown
		}
		return nil
	}
	err := postgres.WaitOut(ctx, read, postgres.LogOutage(zerolog.Nop(), "order-42", "read the order"))
	fmt.Println("tries:", tries, "error:", err)

	duplicate := &pgconn.PgError{Code: "23505", Message: "duplicate key value violates unique constraint"}
	tries = 0
	err = postgres.WaitOut(ctx, func() error { tries++; return duplicate }, nil)
	fmt.Println("tries:", tries, "transient:", postgres.Transient(err))
	// Output:
	// tries: 3 error: <nil>
	// tries: 1 transient: false
}
