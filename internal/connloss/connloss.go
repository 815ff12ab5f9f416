// Package connloss makes a pgx pool handle a database connection the
// server closed (a restart, a failover, a proxy or load balancer dropping
// it) as what it is: a lost connection, not a failed statement.
//
// Two things go wrong without it. A connection closed while a statement
// waits for its answer fails with a bare io.ErrUnexpectedEOF, which DBOS
// Transact v1.8.0 does not count among the connection errors it retries
// (it checks io.EOF, net.Error and the server's shutdown codes), so a
// bookkeeping write of a workflow (starting a child, reading a recorded
// step) fails the workflow. And a pooled connection the server closed
// while it sat idle is handed to the next statement, which fails the same
// way, because the pool only pings connections idle for more than a
// second.
//
// Configure fixes both: connections report the server closing them as a
// *net.OpError wrapping io.EOF (a net.Error, so DBOS's retry applies), and
// the pool checks, before it hands a connection out, that the server has
// neither closed it nor sent it anything (a non-blocking peek at the
// socket, a few microseconds), pinging it otherwise.
package connloss

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrClosedByServer is the cause of a read from a connection the server
// (or something between) closed. It matches io.EOF.
var ErrClosedByServer = closedError{}

type closedError struct{}

func (closedError) Error() string {
	return "the database server closed the connection (restart, failover or a proxy dropping it)"
}

func (closedError) Unwrap() error { return io.EOF }

// defaultIdlePing is pgxpool's own rule: ping a connection idle longer.
const defaultIdlePing = time.Second

// Configure installs the connection-loss handling on a pool configuration
// (see the package comment). It keeps cfg's dial function and ShouldPing,
// and configuring twice only checks twice.
func Configure(cfg *pgxpool.Config) {
	if cfg == nil || cfg.ConnConfig == nil {
		return
	}
	dial := cfg.ConnConfig.DialFunc
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &conn{Conn: c}, nil
	}
	should := cfg.ShouldPing
	if should == nil {
		should = func(_ context.Context, p pgxpool.ShouldPingParams) bool { return p.IdleDuration > defaultIdlePing }
	}
	cfg.ShouldPing = func(ctx context.Context, p pgxpool.ShouldPingParams) bool {
		return should(ctx, p) || !Quiet(p.Conn.PgConn().Conn())
	}
}

// conn reports the server closing the connection as a net.Error.
type conn struct{ net.Conn }

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if errors.Is(err, io.EOF) {
		err = &net.OpError{Op: "read", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: ErrClosedByServer}
	}
	return n, err
}

// Quiet reports whether an idle connection is open with nothing to read:
// false when the server closed it or sent something (an error before it
// closes, a notice). It never consumes data. A connection it cannot check
// (not made by Configure's dialer, or on a platform without a
// non-blocking peek) counts as quiet.
func Quiet(nc net.Conn) bool {
	if t, ok := nc.(*tls.Conn); ok {
		nc = t.NetConn()
	}
	c, ok := nc.(*conn)
	if !ok {
		return true
	}
	for {
		inner, ok := c.Conn.(*conn)
		if !ok {
			return quiet(c.Conn)
		}
		c = inner
	}
}
