package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// Bounds of the CLI's own database calls (doctor, the checks of the
// commands that answer and stop sessions, the store of the operator
// commands): an unreachable host or a blocked query must end in an error
// that says what to check, not in a command that hangs. A connect_timeout
// in the URL applies too, per host tried.
const (
	// connectTimeout bounds connecting, all hosts and fallbacks included.
	connectTimeout = 15 * time.Second
	// queryTimeout bounds one query and the reading of its rows.
	queryTimeout = 10 * time.Second
)

// maskedDatabase is what the CLI prints of a database URL that does not
// parse: such a string cannot be told apart into parts, so no part of it
// is shown (it may hold a password anywhere).
const maskedDatabase = "***** (the database URL does not parse)"

// errUnparsableURL is the error of a database URL that does not parse. It
// does not quote the URL: pgx's own error does, masking passwords only as
// well as it can tell where they are.
var errUnparsableURL = errors.New("the database URL does not parse (not shown: it may hold a password): " +
	"write it as postgres://USER:PASSWORD@HOST:5432/DATABASE or as key=value pairs (host=HOST user=USER dbname=DATABASE); " +
	"check --database-url, HELIX_DATABASE_URL or database-url: in the config file")

// describeDatabase returns what the CLI prints of a database URL: the
// host(s), port(s), user and database it connects to, as pgx reads them
// (a URL or key=value pairs, with the PG* variables and defaults applied).
// A password is never part of it, whether the URL holds one as
// user:password@, ?password= or password=; a URL that does not parse is
// masked whole.
func describeDatabase(dsn string) string {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return maskedDatabase
	}
	// The fallbacks repeat a host for sslmode=prefer (with TLS, then
	// without): list each host once.
	type target struct {
		host string
		port uint16
	}
	targets := []target{{cfg.Host, cfg.Port}}
	for _, f := range cfg.Fallbacks {
		if t := (target{f.Host, f.Port}); !slices.Contains(targets, t) {
			targets = append(targets, t)
		}
	}
	hosts, ports := make([]string, len(targets)), make([]string, len(targets))
	for i, t := range targets {
		hosts[i], ports[i] = t.host, strconv.Itoa(int(t.port))
	}
	if len(slices.Compact(slices.Clone(ports))) == 1 {
		ports = ports[:1]
	}
	parts := []string{"host=" + quoteConnValue(strings.Join(hosts, ",")), "port=" + strings.Join(ports, ",")}
	if cfg.User != "" {
		parts = append(parts, "user="+quoteConnValue(cfg.User))
	}
	if cfg.Database != "" {
		parts = append(parts, "database="+quoteConnValue(cfg.Database))
	}
	return strings.Join(parts, " ")
}

// quoteConnValue quotes a key=value value as libpq does when it needs it.
func quoteConnValue(v string) string {
	if v != "" && !strings.ContainsAny(v, " '\\\t\n") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// connectDatabase opens a connection within connectTimeout. Its errors
// name the database (never the password) and what to check.
func connectDatabase(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, errUnparsableURL
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	start := time.Now()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		return nil, connectError(ctx, dsn, err, time.Since(start))
	}
	return conn, nil
}

// connectError explains a failed connection to dsn, after elapsed.
func connectError(ctx context.Context, dsn string, err error, elapsed time.Duration) error {
	if ctx.Err() == nil && isTimeout(err) {
		return fmt.Errorf("connect to %s: no answer after %s: check that the host is reachable from here (firewall, VPN, security group), "+
			"that Postgres listens on that port, and --database-url / HELIX_DATABASE_URL (%w)", describeDatabase(dsn), elapsed.Round(time.Second), err)
	}
	return fmt.Errorf("connect to %s: %w (check --database-url or HELIX_DATABASE_URL, and that Postgres runs and accepts connections from here)",
		describeDatabase(dsn), err)
}

// isTimeout reports whether err is a deadline running out: a context's
// or a connection's (connect_timeout, a dial).
func isTimeout(err error) bool {
	if pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// queryContext bounds one query, and the reading of its rows, by
// queryTimeout.
func queryContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, queryTimeout)
}

// queryError explains a failed query: what ran, and for a timeout what to
// check. ctx is the command's context (not the query's): a command
// stopped by the user did not time out.
func queryError(ctx context.Context, what string, err error) error {
	if ctx.Err() == nil && isTimeout(err) {
		return fmt.Errorf("%s: the database did not answer within %s: it may be overloaded, or a lock may block the query "+
			"(look for blocked queries in pg_stat_activity) (%w)", what, queryTimeout, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// openStore connects the operator commands to the configured database. The
// commands that only read or write rows (sessions, stream, interrupt) use
// the store directly: they need no engine, no DBOS and no agent
// definitions. Call the returned function to disconnect.
func (g *globals) openStore(ctx context.Context) (*postgres.Store, func(), error) {
	url, err := g.requireDatabaseURL()
	if err != nil {
		return nil, nil, err
	}
	return openStoreURL(ctx, url)
}

// openStoreURL connects a store with a small pool of its own.
func openStoreURL(ctx context.Context, url string) (*postgres.Store, func(), error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, errUnparsableURL
	}
	cfg.MaxConns = 4
	engine.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	// The pool connects lazily: its first connection is this ping's.
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	start := time.Now()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, nil, connectError(ctx, url, err, time.Since(start))
	}
	st, err := postgres.New(pool)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return st, func() { _ = st.Close(); pool.Close() }, nil
}

// explain adds the fix to errors an operator can act on.
func explain(err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && (pg.Code == "42P01" || pg.Code == "3F000") { // undefined_table, invalid_schema_name
		return fmt.Errorf("%w (the helix schema is missing: run `helix-dbos migrate up` against this database)", err)
	}
	return err
}

// printJSON writes v indented, for --json.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
