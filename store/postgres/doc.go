// Package postgres implements the helix session store and stream store on
// PostgreSQL with pgx, in schema "helix" (see package migrations).
//
//	pool, _ := pgxpool.New(ctx, url)
//	st, err := postgres.New(pool)
//	defer st.Close()
//
// One [Store] serves both contracts of package store. It shares the pool
// with DBOS in the engine, so the per-step commit can run inside a DBOS
// transaction: [Store.WithQuerier] returns a view of the store whose session
// methods run on a caller-provided transaction.
//
// # Streams
//
// Chunk writes from every [store.Writer] of a Store go through one batcher:
// deltas are coalesced for up to the flush interval (default 20 ms) or the
// batch limit, then written for all streams in one INSERT statement with one
// NOTIFY. Sequence numbers are allocated per stream inside that statement
// under the stream row's lock, so they become visible in order. Readers
// share one LISTEN connection per Store; a notification is only a hint to
// query the table, and a slow poll covers lost notifications.
//
// Import rule: this package imports helix, store, internal helpers, pgx and
// zerolog; never engine or DBOS. ([Store.ReadCluster] reads DBOS's
// workflow_status table with SQL; its tests create that table with DBOS
// itself, so that they run on DBOS's own schema and indexes.)
package postgres
