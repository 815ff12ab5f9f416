package workflows

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// A journal transaction leaves its notifications (helix.announce: its
// stream, its run's end) to the statement after its COMMIT, so that its
// commit does not take Postgres's notification lock, and commitWith sends
// them in the COMMIT's round trip. One that rolls back announces nothing,
// and leaves nothing for the next one on its connection to send.
func TestJournalTransactionAnnouncesAfterItsCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t)
	l, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	require.NoError(t, err)
	defer func() { _ = l.Close(context.WithoutCancel(ctx)) }()
	_, err = l.Exec(ctx, `LISTEN c`)
	require.NoError(t, err)
	next := func() string {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := l.WaitForNotification(wctx)
		require.NoError(t, err)
		return n.Payload
	}
	j := &journal{pool: pool, log: zerolog.Nop()}

	rolledBack, err := j.begin(ctx)
	require.NoError(t, err)
	_, err = rolledBack.Exec(ctx, `SELECT helix.announce('c', 'rolled back')`)
	require.NoError(t, err)
	rolledBack.close(ctx)

	tx, err := j.begin(ctx)
	require.NoError(t, err)
	defer tx.close(ctx)
	var after bool
	require.NoError(t, tx.QueryRow(ctx, `SELECT helix.announces_after_commit()`).Scan(&after))
	require.True(t, after, "the journal's transaction announces after its commit")
	_, err = tx.Exec(ctx, `SELECT helix.announce('c', 'step')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SELECT pg_notify('c', 'before the commit')`)
	require.NoError(t, err)
	require.NoError(t, tx.commitWith(ctx, j.log, `SELECT helix.announce('c', 'last')`))
	_, err = pool.Exec(ctx, `SELECT pg_notify('c', 'after the commit')`)
	require.NoError(t, err)

	require.Equal(t, "before the commit", next())
	got := []string{next(), next()}
	require.ElementsMatch(t, []string{"step", "last"}, got, "sent after the COMMIT, in its round trip")
	require.Equal(t, "after the commit", next(), "nothing of the rolled-back transaction")
}
