package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// listen opens a connection of its own to the store's database that
// listens on channels.
func listen(t *testing.T, st *postgres.Store, channels ...string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.ConnectConfig(t.Context(), st.Pool().Config().ConnConfig.Copy())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(t.Context()) })
	for _, c := range channels {
		_, err := conn.Exec(t.Context(), "LISTEN "+pgx.Identifier{c}.Sanitize())
		require.NoError(t, err)
	}
	return conn
}

// heard returns the next n notifications conn receives, as
// "channel: payload".
func heard(t *testing.T, conn *pgx.Conn, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		note, err := conn.WaitForNotification(ctx)
		cancel()
		require.NoError(t, err, "after %v", out)
		out = append(out, note.Channel+": "+note.Payload)
	}
	return out
}

// sentinel notifies channel with payload "sentinel" in a transaction of
// its own: what a listener hears before it was notified before it.
func sentinel(t *testing.T, st *postgres.Store, channel string) {
	t.Helper()
	_, err := st.Pool().Exec(t.Context(), `SELECT pg_notify($1, 'sentinel')`, channel)
	require.NoError(t, err)
}

// runOfS1 records session s1 and its run r1 in status, run by workflow
// s1-turn-1, whose DBOS status row says SUCCESS (as a hibernated run's).
func runOfS1(t *testing.T, st *postgres.Store, status helix.RunStatus) {
	t.Helper()
	ctx := t.Context()
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: "s1", AgentType: "payer"})
	require.NoError(t, err)
	_, err = st.CreateRun(ctx, store.CreateRunParams{RunID: "r1", SessionID: "s1", Turn: 1, Status: status, WorkflowID: "s1-turn-1"})
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `INSERT INTO dbos.workflow_status (workflow_uuid, status, created_at) VALUES ('s1-turn-1', 'SUCCESS', 0)`)
	require.NoError(t, err)
}

// An answer to a hibernated run writes no DBOS message (its continuation
// reads the answer from the session's pending call) and, sent with its
// wake announced by the caller, its transaction notifies nothing: no
// NOTIFY takes Postgres's notification lock at its commit. The caller's
// Store.Announce sends the wake afterwards. An answer to a run that is
// not hibernated still writes the message, which DBOS's trigger
// announces, as a live wait needs.
func TestAnswerToAHibernatedRunNotifiesNothingInItsTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newClusterStore(t)
	pool := st.Pool()
	runOfS1(t, st, helix.RunSuspendedClientTool)
	messages := func() (n int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM dbos.notifications WHERE destination_uuid = 's1-turn-1'`).Scan(&n))
		return n
	}
	l := listen(t, st, postgres.RunRecordedChannel, "dbos_notifications_channel", "helix_run_status")

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	hibernated, err := postgres.HibernateRun(ctx, postgres.PgxQuerier(tx), "r1", "s1-turn-1", 0, []string{"helix.tool_call:c1"}, 0)
	require.NoError(t, err)
	require.True(t, hibernated)
	require.NoError(t, tx.Commit(ctx))

	var woke *string
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		sql, args := postgres.SendMessageStatement("s1-turn-1", "helix.tool_call:c1", "e30=", "k1", false)
		return tx.QueryRow(ctx, sql, args...).Scan(&woke)
	}))
	require.NotNil(t, woke, "the answer woke the run")
	require.Zero(t, messages(), "no DBOS message for a hibernated run")
	sentinel(t, st, postgres.RunRecordedChannel)
	st.Announce(postgres.RunRecordedChannel, *woke)
	require.Equal(t, []string{postgres.RunRecordedChannel + ": sentinel", postgres.RunRecordedChannel + ": " + *woke}, heard(t, l, 2),
		"the answer's transaction notified nothing; the announcement came after it")

	// Woken (its continuation not begun): a second answer is a message,
	// announced by DBOS's trigger at the commit.
	sql, args := postgres.SendMessageStatement("s1-turn-1", "helix.tool_call:c2", "e30=", "k2", false)
	var again *string
	require.NoError(t, pool.QueryRow(ctx, sql, args...).Scan(&again))
	require.Nil(t, again, "woken already")
	require.Equal(t, 1, messages())
	require.Equal(t, []string{"dbos_notifications_channel: s1-turn-1::helix.tool_call:c2"}, heard(t, l, 1))
}

// A transaction that announces after its commit (SET LOCAL
// helix.announce_after_commit = on) leaves its notifications, its runs'
// status changes among them, to the helix.announce_pending that follows
// its COMMIT; one that rolls back leaves none. Without the setting they go
// out at the commit, as before.
func TestAnnouncementsAfterTheCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newClusterStore(t)
	pool := st.Pool()
	runOfS1(t, st, helix.RunRunning)
	l := listen(t, st, "c", "helix_run_status")
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	pending := func() (n int) {
		require.NoError(t, conn.QueryRow(ctx, postgres.AnnouncePendingSQL).Scan(&n))
		return n
	}

	b := &pgx.Batch{}
	b.Queue(postgres.BeginSQL)
	b.Queue(postgres.AnnounceAfterCommitSQL)
	b.Queue(`SELECT helix.announce('c', 'p1')`)
	b.Queue(`UPDATE helix.runs SET status = 'completed', completed_at = now() WHERE run_id = 'r1'`)
	b.Queue(postgres.CommitSQL)
	require.NoError(t, conn.SendBatch(ctx, b).Close())
	sentinel(t, st, "c")
	require.Equal(t, 2, pending())
	got := heard(t, l, 3)
	require.Equal(t, "c: sentinel", got[0], "nothing went out at the commit")
	require.ElementsMatch(t, []string{"c: p1", "helix_run_status: r1"}, got[1:])

	b = &pgx.Batch{}
	b.Queue(postgres.BeginSQL)
	b.Queue(postgres.AnnounceAfterCommitSQL)
	b.Queue(`SELECT helix.announce('c', 'p2')`)
	b.Queue(postgres.RollbackSQL)
	require.NoError(t, conn.SendBatch(ctx, b).Close())
	require.Zero(t, pending(), "a rolled-back transaction announces nothing")

	_, err = conn.Exec(ctx, `SELECT helix.announce('c', 'p3')`)
	require.NoError(t, err)
	require.Zero(t, pending())
	require.Equal(t, []string{"c: p3"}, heard(t, l, 1), "without the setting, at the commit")
}

// Store.Announce sends every announcement once, those queued while one
// goes out together, and Close sends what is still queued.
func TestStoreAnnounce(t *testing.T) {
	t.Parallel()
	st := newTestStore(t)
	l := listen(t, st, "a")
	const n = 200
	var wg sync.WaitGroup
	want := make([]string, 0, n)
	for i := range n {
		want = append(want, fmt.Sprintf("a: p%d", i))
		wg.Go(func() { st.Announce("a", fmt.Sprintf("p%d", i)) })
	}
	wg.Wait()
	require.NoError(t, st.Close())
	st.Announce("a", "after-close") // does nothing
	sentinel(t, st, "a")
	got := heard(t, l, n+1)
	require.ElementsMatch(t, want, got[:n])
	require.Equal(t, "a: sentinel", got[n], "every announcement went out before Close returned")
}
