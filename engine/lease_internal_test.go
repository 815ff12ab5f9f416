package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/stretchr/testify/require"
)

// The fencing rules of the lease: nothing runs before the first renewal or
// while a rejoin is in progress; once rejoined after a takeover, the
// executions of the old epoch are refused with an error DBOS treats as a
// lost ownership, and new ones run.
func TestLeaseFencesTheEpochsOfATakeover(t *testing.T) {
	l := newLease(time.Minute)
	waiting := func(fn func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		return fn(ctx)
	}
	err := waiting(func(ctx context.Context) error { _, _, err := l.Acquire(ctx); return err })
	require.ErrorIs(t, err, context.DeadlineExceeded, "no execution starts before the lease is first renewed")

	l.renewed(time.Now())
	old, waited, err := l.Acquire(t.Context())
	require.NoError(t, err)
	require.False(t, waited)
	require.NoError(t, l.Check(t.Context(), old))

	l.suspend() // the heartbeat found the executor taken over
	require.ErrorIs(t, waiting(func(ctx context.Context) error { return l.Check(ctx, old) }), context.DeadlineExceeded,
		"steps wait while the rejoin re-enqueues what this process held")
	released := make(chan error, 1)
	go func() { released <- l.Check(t.Context(), old) }()
	l.rejoined(time.Now())
	err = <-released
	var taken *TakenOverError
	require.True(t, errors.As(err, &taken), "%v", err)
	require.ErrorIs(t, err, dbos.ErrConflictingWorkflowID)

	fresh, _, err := l.Acquire(t.Context())
	require.NoError(t, err)
	require.NotEqual(t, old, fresh)
	require.NoError(t, l.Check(t.Context(), fresh))

	l.evict(errors.New("executor ID x is now held by process 7 on h"))
	err = l.Check(t.Context(), fresh)
	require.ErrorIs(t, err, dbos.ErrConflictingWorkflowID)
	require.EqualError(t, err, "executor ID x is now held by process 7 on h")
}

// A lease that ran out (renewals failing: Postgres unreachable, a long
// pause) makes steps wait, and a renewal lets them go on, in the same epoch.
func TestLeaseWaitsWhileExpired(t *testing.T) {
	l := newLease(time.Second)
	l.renewed(time.Now().Add(-time.Hour))
	epoch, waited, err := func() (uint64, bool, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		return l.Acquire(ctx)
	}()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.True(t, waited)
	require.Zero(t, epoch)
	l.renewed(time.Now())
	epoch, waited, err = l.Acquire(t.Context())
	require.NoError(t, err)
	require.False(t, waited)
	require.NoError(t, l.Check(t.Context(), epoch))
}

// A newer execution of a workflow in this process supersedes the older
// one: DBOS dequeues a workflow again only after the older execution lost
// it. The older one's steps are refused; releasing it leaves the newer one.
func TestFenceRefusesASupersededExecution(t *testing.T) {
	l := newLease(time.Minute)
	l.renewed(time.Now())
	f := newFence(l, nil, "me")
	older, err := f.Acquire(t.Context(), "wf-1", "token")
	require.NoError(t, err)
	require.NoError(t, f.Check(t.Context(), older))
	newer, err := f.Acquire(t.Context(), "wf-1", "token")
	require.NoError(t, err)
	other, err := f.Acquire(t.Context(), "wf-2", "token")
	require.NoError(t, err)

	err = f.Check(t.Context(), older)
	require.ErrorIs(t, err, dbos.ErrConflictingWorkflowID)
	require.ErrorContains(t, err, "a newer execution of workflow wf-1 runs in this process")
	require.NoError(t, f.Check(t.Context(), newer))
	require.NoError(t, f.Check(t.Context(), other))
	f.Release(older)
	require.NoError(t, f.Check(t.Context(), newer), "releasing the older execution leaves the newer one current")
	f.Release(newer)
	f.Release(other)
	require.Empty(t, f.current)
}
