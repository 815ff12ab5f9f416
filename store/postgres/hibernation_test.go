package postgres_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// A message sent to the workflow of a hibernated run wakes it once and
// returns the wake's announcement, which names the run, its session, its
// workflow, the continuation due and the agent: what starting the
// continuation needs. A message to a run that is not hibernated (or no
// longer: woken already) returns none. The deadline sweep counts the runs
// it woke.
func TestSendToolMessageAnnouncesTheWake(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newClusterStore(t)
	pool := st.Pool()
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: "s1", AgentType: "payer"})
	require.NoError(t, err)
	_, err = st.CreateRun(ctx, store.CreateRunParams{RunID: "r1", SessionID: "s1", Turn: 1,
		Status: helix.RunSuspendedClientTool, WorkflowID: "s1-turn-1"})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO dbos.workflow_status (workflow_uuid, status, created_at) VALUES ('s1-turn-1', 'SUCCESS', 0)`)
	require.NoError(t, err)

	send := func(key string) *string {
		t.Helper()
		sql, args := postgres.SendMessageStatement("s1-turn-1", "topic", "e30=", key)
		var woke *string
		require.NoError(t, pool.QueryRow(ctx, sql, args...).Scan(&woke))
		return woke
	}
	require.Nil(t, send("m1"), "the run is not hibernated")

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	hibernated, err := postgres.HibernateRun(ctx, postgres.PgxQuerier(tx), "r1", "s1-turn-1", []string{"other"}, 0)
	require.NoError(t, err)
	require.True(t, hibernated)
	require.NoError(t, tx.Commit(ctx))

	woke := send("m2")
	require.NotNil(t, woke)
	o, ok := postgres.ParseWakeAnnouncement(*woke)
	require.True(t, ok, "announcement %q", *woke)
	require.Equal(t, postgres.OrphanRun{RunID: "r1", SessionID: "s1", WorkflowID: "s1-turn-1", Wake: 1, AgentType: "payer"}, o)
	require.Nil(t, send("m3"), "woken already")

	orphans, err := postgres.ListOrphanRuns(ctx, postgres.PgxQuerier(pool))
	require.NoError(t, err)
	require.Equal(t, []postgres.OrphanRun{o}, orphans, "the woken run is the sweep's until its continuation begins")
}

// Only a wake's announcement parses as one: a recorded run's ID (what
// ExecuteTx announces), the empty payload of a reconnection and malformed
// ones do not.
func TestParseWakeAnnouncement(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "r1", "r1\ts1\twf\t0\ta", "r1\ts1\twf\tx\ta", "\ts1\twf\t1\ta", "r1\ts1\t\t1\ta", "r1\ts1\twf\t1"} {
		_, ok := postgres.ParseWakeAnnouncement(p)
		require.False(t, ok, "payload %q", p)
	}
	o, ok := postgres.ParseWakeAnnouncement("r1\ts1\twf\t2\ta")
	require.True(t, ok)
	require.Equal(t, postgres.OrphanRun{RunID: "r1", SessionID: "s1", WorkflowID: "wf", Wake: 2, AgentType: "a"}, o)
}
