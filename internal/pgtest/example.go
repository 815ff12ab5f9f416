package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

var (
	examplesMu sync.Mutex
	examples   []string // the example databases to drop, by name
)

// ExampleURL returns the URL of a fresh, empty database on the test
// binary's server, for runnable examples (which have no testing.TB): the
// engine of the example migrates it when it launches. Main drops it after
// the tests. It panics when no server can be provided: an example cannot
// skip, and its output would not say why.
func ExampleURL() string {
	s, err := provision()
	if err != nil {
		panic(fmt.Sprintf("pgtest: no PostgreSQL server for the examples: %v", err))
	}
	name := "helix_example_" + uuid.NewString()[:8]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		panic(fmt.Sprintf("pgtest: connect to the server for an example database: %v", err))
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		panic(fmt.Sprintf("pgtest: create example database %s: %v", name, err))
	}
	examplesMu.Lock()
	examples = append(examples, name)
	examplesMu.Unlock()
	u, err := url.Parse(s.URL)
	if err != nil {
		panic(fmt.Sprintf("pgtest: parse the server URL: %v", err))
	}
	u.Path = "/" + name
	return u.String()
}

// dropExampleDatabases drops the databases ExampleURL created.
func dropExampleDatabases() error {
	examplesMu.Lock()
	names := examples
	examples = nil
	examplesMu.Unlock()
	if len(names) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, server.URL)
	if err != nil {
		return fmt.Errorf("drop the example databases %v: %w", names, err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var errs []error
	for _, n := range names {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" WITH (FORCE)"); err != nil {
			errs = append(errs, fmt.Errorf("drop example database %s: %w", n, err))
		}
	}
	return errors.Join(errs...)
}
