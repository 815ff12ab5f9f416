package connloss_test

import (
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/connloss"
)

// dialPair returns a client connection made by a configured dialer and
// the server's end of it.
func dialPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { require.NoError(t, ln.Close()) }()
	cfg, err := pgxpool.ParseConfig("postgres://u@" + ln.Addr().String() + "/db")
	require.NoError(t, err)
	connloss.Configure(cfg)
	connloss.Configure(cfg) // twice: still one check
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = cfg.ConnConfig.DialFunc(t.Context(), "tcp", ln.Addr().String())
	require.NoError(t, err)
	server = <-accepted
	require.NotNil(t, server)
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	return client, server
}

func TestQuietSeesWhatTheServerDid(t *testing.T) {
	client, server := dialPair(t)
	require.True(t, connloss.Quiet(client), "open, nothing sent")

	_, err := server.Write([]byte("E"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !connloss.Quiet(client) }, waitFor, tick, "something to read")
	buf := make([]byte, 1)
	n, err := client.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "E", string(buf[:n]), "the check consumed nothing")
	require.True(t, connloss.Quiet(client))

	require.NoError(t, server.Close())
	require.Eventually(t, func() bool { return !connloss.Quiet(client) }, waitFor, tick, "closed by the server")
	_, err = client.Read(buf)
	var nerr net.Error
	require.ErrorAs(t, err, &nerr, "a net.Error, which DBOS retries")
	require.ErrorIs(t, err, io.EOF)
	require.ErrorIs(t, err, connloss.ErrClosedByServer)
	require.Contains(t, err.Error(), "the database server closed the connection")
}

func TestQuietAcceptsConnectionsItDidNotMake(t *testing.T) {
	a, b := net.Pipe()
	defer func() { _ = a.Close(); _ = b.Close() }()
	require.True(t, connloss.Quiet(a))
}

const (
	waitFor = 5 * time.Second
	tick    = time.Millisecond
)

// BenchmarkQuiet measures the check the pool runs at every acquire.
func BenchmarkQuiet(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	defer func() { _ = ln.Close() }()
	cfg, err := pgxpool.ParseConfig("postgres://u@" + ln.Addr().String() + "/db")
	require.NoError(b, err)
	connloss.Configure(cfg)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer func() { _ = c.Close() }()
			_, _ = io.Copy(io.Discard, c)
		}
	}()
	client, err := cfg.ConnConfig.DialFunc(b.Context(), "tcp", ln.Addr().String())
	require.NoError(b, err)
	defer func() { _ = client.Close() }()
	for b.Loop() {
		if !connloss.Quiet(client) {
			b.Fatal("an open, quiet connection reported as not quiet")
		}
	}
}

// pgx may leave a reader goroutine blocked in a Read of an idle pooled
// connection: the check must not wait for it.
func TestQuietBesideABlockedReader(t *testing.T) {
	client, server := dialPair(t)
	read := make(chan error, 1)
	go func() {
		_, err := client.Read(make([]byte, 1))
		read <- err
	}()
	require.Eventually(t, func() bool { // the reader is parked in its Read
		buf := make([]byte, 1<<20)
		for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "[IO wait") && strings.Contains(g, "TestQuietBesideABlockedReader.func1") {
				return true
			}
		}
		return false
	}, waitFor, tick)
	done := make(chan bool, 1)
	go func() { done <- connloss.Quiet(client) }()
	select {
	case q := <-done:
		require.True(t, q)
	case <-time.After(waitFor):
		t.Fatal("Quiet waited for the blocked reader")
	}
	require.NoError(t, server.Close())
	require.ErrorIs(t, <-read, connloss.ErrClosedByServer)
}
