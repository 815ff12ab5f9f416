package workflows

import (
	"errors"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// ownerProbe is what a probe workflow saw: the token executionOwner gave
// it, the row's token at that moment, and what opening its journal did
// after the test let it go on.
type ownerProbe struct {
	mine, row string
	err       error
	opened    error
}

// probeOwner starts a workflow on a real DBOS context that reads its owner
// token, reports it, waits for the test (which may hand the workflow to
// another execution meanwhile, as a takeover does while a process is
// frozen), then opens its journal; the test restores the row's token
// before it lets the workflow end, so that DBOS can record its outcome.
func probeOwner(t *testing.T, meanwhile func(pool *pgxpool.Pool, wfID, mine string)) ownerProbe {
	t.Helper()
	url := pgtest.NewURL(t)
	dc, err := dbos.NewContext(t.Context(), dbos.Config{DatabaseURL: url, AppName: "helix-owner-test"})
	require.NoError(t, err)
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	st, err := postgres.New(pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })

	seen, goOn, done, end := make(chan ownerProbe, 1), make(chan struct{}), make(chan ownerProbe, 1), make(chan struct{})
	probe := func(ctx dbos.Context, _ string) (string, error) {
		wfID, err := dbos.GetWorkflowID(ctx)
		if err != nil {
			return "", err
		}
		var p ownerProbe
		p.mine, p.err = executionOwner(ctx)
		if p.err == nil {
			p.err = pool.QueryRow(ctx, `SELECT owner_xid FROM dbos.workflow_status WHERE workflow_uuid = $1`, wfID).Scan(&p.row)
		}
		seen <- p
		<-goOn
		_, p.opened = openJournal(ctx, st, zerolog.Nop(), wfID, p.mine, journalScope{})
		done <- p
		<-end
		return "ok", nil
	}
	dbos.RegisterWorkflow(dc, probe, dbos.WithWorkflowName("helix.test.owner_probe"))
	require.NoError(t, dbos.Launch(dc))
	t.Cleanup(func() { dbos.Shutdown(dc, 10*time.Second) })

	h, err := dbos.RunWorkflow(dc, probe, "", dbos.WithWorkflowID("owner-probe"))
	require.NoError(t, err)
	first := <-seen
	require.NoError(t, first.err)
	if meanwhile != nil {
		meanwhile(pool, "owner-probe", first.mine)
	}
	close(goOn)
	p := <-done
	_, err = pool.Exec(t.Context(), `UPDATE dbos.workflow_status SET owner_xid = $2 WHERE workflow_uuid = $1`, "owner-probe", p.mine)
	require.NoError(t, err)
	close(end)
	out, err := h.GetResult()
	require.NoError(t, err)
	require.Equal(t, "ok", out)
	return p
}

// The token an execution's writes are fenced by is the one DBOS claimed
// the workflow with (read from the execution's context, which a DBOS
// upgrade could move: this test then fails).
func TestExecutionOwnerIsTheClaimedToken(t *testing.T) {
	p := probeOwner(t, nil)
	require.NotEmpty(t, p.mine)
	require.Equal(t, p.row, p.mine, "the execution's token is the one DBOS wrote in the workflow's row when it started it")
	require.NoError(t, p.opened, "the execution owns its workflow")
}

// An execution that stalls after DBOS started it (its process frozen) and
// finds its workflow taken over by another execution when it opens its
// journal records nothing: it must not take the new owner's token, now in
// the row, for its own (the chaos suite saw such a zombie write a record
// into the new owner's journal, which then failed on the duplicate).
func TestJournalOfAnExecutionTakenOverBeforeItOpenedRefusesIt(t *testing.T) {
	p := probeOwner(t, func(pool *pgxpool.Pool, wfID, mine string) {
		_, err := pool.Exec(t.Context(), `UPDATE dbos.workflow_status SET owner_xid = 'the-new-owner', executor_id = 'elsewhere'
			WHERE workflow_uuid = $1`, wfID)
		require.NoError(t, err)
	})
	require.Error(t, p.opened)
	require.True(t, errors.Is(p.opened, dbos.ErrConflictingWorkflowID), "%v", p.opened)
	require.ErrorContains(t, p.opened, "no longer owned by this execution")
}
