package engine

import (
	"context"
	"encoding/json"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// stoppedWithAPendingWorkflow runs a session of executor rec-a until it
// waits for an approval and stops the engine: the session's workflow stays
// pending under rec-a, whose row is marked stopped. It returns the
// database and the workflow.
func stoppedWithAPendingWorkflow(t *testing.T) (url, workflowID string) {
	t.Helper()
	url = pgtest.NewURL(t)
	agent := &helix.Agent{
		Name: "payer",
		Tools: []*helix.Tool{helix.MustNewTool("pay", "Pay", func(context.Context, struct{}, helix.ToolContext) (string, error) {
			return "paid", nil
		}, helix.RequireApproval())},
		Model: helix.ModelFunc(func(context.Context, helix.ModelRequest, helix.StreamCallbacks) (helix.StepResult, error) {
			return helix.StepResult{Type: helix.StepToolCalls, StopReason: helix.StopToolUse,
				ToolCalls: []helix.ToolCall{{ID: "p1", Name: "pay", Arguments: json.RawMessage(`{}`)}}}, nil
		}),
	}
	a, err := New(t.Context(), Config{DatabaseURL: url, ExecutorID: "rec-a"})
	require.NoError(t, err)
	require.NoError(t, a.Register(agent))
	require.NoError(t, a.Launch(t.Context()))
	h, err := a.Execute(t.Context(), agent, Input{Message: "pay"}, nil)
	require.NoError(t, err)
	res, err := h.Result(t.Context())
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, res.Status)
	require.NoError(t, a.Shutdown(t.Context()))
	return url, h.WorkflowID
}

// A recovery re-enqueues an executor's workflows only while the claim is
// the recovering engine's and not yet recovered: one that runs late (its
// engine stalled, or the statement waited out a database restart) after
// another engine re-claimed and recovered the executor, which may since
// have rejoined and run its workflows again, re-enqueues nothing.
func TestRecoveryNeedsItsClaim(t *testing.T) {
	url, workflowID := stoppedWithAPendingWorkflow(t)
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.WithoutCancel(t.Context())) }()
	workflow := func() (status string, owner *string) {
		require.NoError(t, conn.QueryRow(t.Context(), `SELECT status, owner_xid FROM dbos.workflow_status WHERE workflow_uuid = $1`,
			workflowID).Scan(&status, &owner))
		return status, owner
	}
	status, owner := workflow()
	require.Equal(t, "PENDING", status)
	require.NotNil(t, owner)
	_, err = conn.Exec(t.Context(), `UPDATE helix.executors SET taken_over_by = 'rec-b', taken_over_at = now() WHERE executor_id = 'rec-a'`)
	require.NoError(t, err)

	pool, err := openPool(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	nop := zerolog.Nop()
	late := &takeover{pool: pool, id: "rec-y", app: DefaultAppName, version: DefaultApplicationVersion, log: &nop}
	_, err = late.recover(t.Context(), "rec-a")
	require.ErrorIs(t, err, errClaimLost, "rec-b holds the claim")
	status, owner2 := workflow()
	require.Equal(t, "PENDING", status, "nothing re-enqueued")
	require.Equal(t, *owner, *owner2)

	_, err = conn.Exec(t.Context(), `UPDATE helix.executors SET taken_over_by = 'rec-y' WHERE executor_id = 'rec-a'`)
	require.NoError(t, err)
	n, err := late.recover(t.Context(), "rec-a")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	status, owner = workflow()
	require.Equal(t, "ENQUEUED", status)
	require.Nil(t, owner)
	var queue string
	var recovered int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT w.queue_name, x.recovered_workflows FROM dbos.workflow_status w, helix.executors x
		WHERE w.workflow_uuid = $1 AND x.executor_id = 'rec-a'`, workflowID).Scan(&queue, &recovered))
	require.Equal(t, dbosRecoveryQueue, queue)
	require.Equal(t, 1, recovered)

	_, err = late.recover(t.Context(), "rec-a")
	require.ErrorIs(t, err, errClaimLost, "recovered already: once")
}

// An execution that waited for the lease at its start runs only if its
// workflow is still pending under this executor and owned by it (the token
// DBOS gave it): not once a peer re-enqueued it, nor once another execution
// (here or elsewhere) dequeued it since.
func TestFenceChecksTheOwnerAfterAWait(t *testing.T) {
	url, workflowID := stoppedWithAPendingWorkflow(t)
	pool, err := openPool(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	f := newFence(newLease(time.Minute), pool, "rec-a")
	var owner string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT owner_xid FROM dbos.workflow_status WHERE workflow_uuid = $1`, workflowID).Scan(&owner))
	require.NoError(t, f.stillOurs(t.Context(), workflowID, owner))

	set := func(sql string) {
		t.Helper()
		_, err := pool.Exec(t.Context(), sql, workflowID)
		require.NoError(t, err)
	}
	set(`UPDATE dbos.workflow_status SET owner_xid = 'dequeued-again' WHERE workflow_uuid = $1`)
	require.ErrorIs(t, f.stillOurs(t.Context(), workflowID, owner), dbos.ErrConflictingWorkflowID, "another execution of this executor")
	set(`UPDATE dbos.workflow_status SET status = 'ENQUEUED', owner_xid = NULL WHERE workflow_uuid = $1`)
	require.ErrorIs(t, f.stillOurs(t.Context(), workflowID, owner), dbos.ErrConflictingWorkflowID, "re-enqueued by a peer")
	require.ErrorIs(t, f.stillOurs(t.Context(), workflowID, ""), dbos.ErrConflictingWorkflowID, "no token")
	set(`UPDATE dbos.workflow_status SET status = 'PENDING', owner_xid = 'elsewhere', executor_id = 'rec-b' WHERE workflow_uuid = $1`)
	require.ErrorIs(t, f.stillOurs(t.Context(), workflowID, "elsewhere"), dbos.ErrConflictingWorkflowID, "dequeued by a peer")
	require.ErrorIs(t, f.stillOurs(t.Context(), "no-such-workflow", owner), dbos.ErrConflictingWorkflowID, "no such workflow")
}

// The fence's check after a wait outlasts a database outage (its lease is
// often invalid because of one): it does not fail the execution, whose
// error would end its workflow failed in DBOS with its run left running.
// The pool's connections are refused for three attempts, then accepted.
func TestFenceCheckWaitsOutAnOutage(t *testing.T) {
	url, workflowID := stoppedWithAPendingWorkflow(t)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	var dials atomic.Int32
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials.Add(1) <= 3 {
			return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	direct, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer func() { _ = direct.Close(context.WithoutCancel(t.Context())) }()
	var owner string
	require.NoError(t, direct.QueryRow(t.Context(), `SELECT owner_xid FROM dbos.workflow_status WHERE workflow_uuid = $1`, workflowID).Scan(&owner))

	f := newFence(newLease(time.Minute), pool, "rec-a")
	require.NoError(t, f.stillOurs(t.Context(), workflowID, owner))
	require.Greater(t, dials.Load(), int32(3), "the check met the refused connections")
}
