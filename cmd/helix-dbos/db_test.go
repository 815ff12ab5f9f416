package main

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// The password of a database URL never reaches the output of a command
// that fails to connect, whichever form the URL holds it in: doctor, the
// commands that answer or stop a session (checkClientDatabase), those that
// read the store, migrate, those that start an engine.
func TestUnreachableDatabaseHidesThePassword(t *testing.T) {
	t.Parallel()
	const secret = "pw123"
	for _, tc := range []struct{ name, url, shown string }{
		{"URL", "postgres://nobody:" + secret + "@127.0.0.1:1/none?connect_timeout=2&sslmode=disable", "host=127.0.0.1 port=1 user=nobody database=none"},
		{"URL query", "postgres://nobody@127.0.0.1:1/none?password=" + secret + "&connect_timeout=2&sslmode=disable", "host=127.0.0.1 port=1 user=nobody database=none"},
		{"key=value", "host=127.0.0.1 port=1 user=nobody password=" + secret + " dbname=none connect_timeout=2 sslmode=disable", "host=127.0.0.1 port=1 user=nobody database=none"},
		{"unparsable", "postgres://nobody:" + secret + "@127.0.0.1:port/none", maskedDatabase},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := binOpts{env: []string{"HELIX_DATABASE_URL=" + tc.url}}

			r := runBin(t, o, "doctor")
			require.Equal(t, 1, r.code, "%s", r)
			require.Contains(t, r.stdout, "✗ database reachable   "+tc.shown+"\n")
			if tc.shown == maskedDatabase {
				require.Contains(t, r.stdout, "    the database URL does not parse (not shown: it may hold a password)")
			}
			require.NotContains(t, r.String(), secret)
			rep, r := doctorJSON(t, o)
			require.Equal(t, tc.shown, rep.Checks[0].Summary)
			require.NotContains(t, r.String(), secret)

			for _, args := range [][]string{
				{"approve", "s-1", "call-1"},
				{"abort", "s-1"},
				{"interrupt", "s-1"},
				{"sessions", "list"},
				{"migrate", "status"},
				{"resume", "s-1"},
				{"serve", "--agents", exampleAgents, "--allow-unauthenticated", "--addr", "127.0.0.1:0"},
			} {
				r := runBin(t, o, args...)
				require.Equal(t, 1, r.code, "%v: %s", args, r)
				require.NotContains(t, r.String(), secret, "%v", args)
				if tc.shown == maskedDatabase {
					require.Contains(t, r.stderr, "the database URL does not parse (not shown: it may hold a password)", "%v", args)
				} else {
					require.Contains(t, r.stderr, "connect to "+tc.shown+": ", "%v", args)
				}
			}
		})
	}
}

// silentDatabase listens on a port and accepts connections it never
// answers: a database host that would hang a client forever.
func silentDatabase(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// A database host that accepts connections but never answers fails doctor
// and the commands that check the database before answering a session,
// once connectTimeout has passed, with an error that says what timed out
// and what to check. The three commands wait out connectTimeout at the
// same time, in this test's one parallel slot: as parallel subtests they
// held both of CI's two slots for 15 s, then one for 15 s more.
func TestUnansweredConnectTimesOut(t *testing.T) {
	t.Parallel()
	host, port, err := net.SplitHostPort(silentDatabase(t))
	require.NoError(t, err)
	o := binOpts{env: []string{"HELIX_DATABASE_URL=postgres://helix:pw@" + net.JoinHostPort(host, port) + "/app?sslmode=disable"}}
	shown := "host=127.0.0.1 port=" + port + " user=helix database=app"
	within := connectTimeout + 15*time.Second

	start := time.Now()
	doctor := startBin(t, o, "doctor")
	approve := startBin(t, o, "approve", "s-1", "call-1")
	list := startBin(t, o, "sessions", "list")

	t.Run("doctor", func(t *testing.T) {
		r := doctor.result(t)
		require.Less(t, time.Since(start), within)
		require.Equal(t, 1, r.code, "%s", r)
		require.Contains(t, r.stdout, "✗ database reachable   "+shown+"\n    connect to "+shown+": no answer after 15s: "+
			"check that the host is reachable from here (firewall, VPN, security group), that Postgres listens on that port")
		require.Contains(t, r.stdout, "- migrations current   no database\n")
	})
	t.Run("approve", func(t *testing.T) {
		r := approve.result(t)
		require.Less(t, time.Since(start), within)
		require.Equal(t, 1, r.code, "%s", r)
		require.True(t, strings.HasPrefix(r.stderr, "helix-dbos: connect to "+shown+": no answer after 15s: check that the host is reachable"), r.stderr)
	})
	t.Run("sessions list", func(t *testing.T) {
		r := list.result(t)
		require.Less(t, time.Since(start), within)
		require.Equal(t, 1, r.code, "%s", r)
		require.Contains(t, r.stderr, "connect to "+shown+": no answer after 15s")
	})
}

// A doctor query that a lock blocks fails its check after queryTimeout,
// saying what it read and what to look for; the checks after it are
// skipped (the connection is gone), and doctor ends.
func TestDoctorQueryTimesOut(t *testing.T) {
	t.Parallel()
	url, _, _ := completedSession(t)
	ctx := t.Context()
	locker, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer locker.Close(context.WithoutCancel(ctx))
	tx, err := locker.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	_, err = tx.Exec(ctx, `LOCK TABLE helix.executors IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	start := time.Now()
	rep, r := doctorJSON(t, binOpts{env: []string{"HELIX_DATABASE_URL=" + url}})
	require.Less(t, time.Since(start), queryTimeout+20*time.Second)
	require.Equal(t, 1, r.code, "%s", r)
	require.Equal(t, map[string]string{"database": checkOK, "migrations": checkOK, "dbos": checkOK, "executors": checkFail,
		"queues": checkSkipped, "sessions": checkSkipped}, statuses(rep))
	require.Contains(t, rep.Checks[3].Problems[0].Problem, "read helix.executors: the database did not answer within 10s: "+
		"it may be overloaded, or a lock may block the query (look for blocked queries in pg_stat_activity)")
	require.Equal(t, "the database connection was lost (see above)", rep.Checks[4].Summary)
}
