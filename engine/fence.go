package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// fence is the engine's steps.Fence: the lease, plus what ties a ticket to
// one execution of one workflow in this process.
//
//   - A newer execution of a workflow in this process supersedes the older
//     one (DBOS dequeues a workflow again only after the older execution
//     lost it): the older one's steps are refused.
//   - An execution that had to wait for the lease at its start (a takeover
//     or an outage was in progress) checks, once the lease is valid again,
//     that its workflow is still pending under this executor and owned by
//     it (the owner token DBOS gave it): if a peer took it over or
//     re-enqueued it meanwhile (and whoever dequeued it since), it runs
//     nothing.
type fence struct {
	lease *lease
	pool  *pgxpool.Pool
	id    string         // this executor
	log   zerolog.Logger // hears of stillOurs's checks that an outage failed

	mu      sync.Mutex
	seq     uint64
	current map[string]uint64 // workflow ID → the Seq of its newest execution here
}

func newFence(l *lease, pool *pgxpool.Pool, executorID string) *fence {
	return &fence{lease: l, pool: pool, id: executorID, log: zerolog.Nop(), current: map[string]uint64{}}
}

var _ steps.Fence = (*fence)(nil)

// Acquire implements steps.Fence.
func (f *fence) Acquire(ctx context.Context, workflowID, owner string) (steps.Ticket, error) {
	f.mu.Lock()
	f.seq++
	t := steps.Ticket{WorkflowID: workflowID, Seq: f.seq, Owner: owner}
	f.current[workflowID] = t.Seq // at once, before any wait: the newest start wins
	f.mu.Unlock()
	epoch, valid, _, err := f.lease.now()
	if err == nil && !valid {
		// A takeover or an outage may be under way (or this process was
		// frozen since DBOS started the execution): wait for the lease,
		// then check that the workflow is still this execution's.
		if epoch, _, err = f.lease.Acquire(ctx); err == nil {
			err = f.stillOurs(ctx, workflowID, owner)
		}
	}
	if err != nil {
		f.Release(t)
		return steps.Ticket{}, err
	}
	t.Epoch = epoch
	return t, nil
}

// stillOurs checks that the workflow is pending under this executor, still
// owned by the execution whose token is owner. The check waits out a
// database outage (the lease is often invalid because of one): its error
// would end the workflow failed in DBOS, its run left running.
func (f *fence) stillOurs(ctx context.Context, workflowID, owner string) error {
	ours := false
	if owner != "" {
		err := postgres.WaitOut(ctx, func() (err error) {
			ours, err = postgres.WorkflowStillOwned(ctx, postgres.PgxQuerier(f.pool), workflowID, f.id, &owner)
			return err
		}, postgres.LogOutage(f.log, workflowID, "check that the workflow is still this executor's"))
		if err != nil {
			return fmt.Errorf("engine: check that workflow %s is still this executor's: %w", workflowID, err)
		}
	}
	if !ours {
		return &TakenOverError{Reason: fmt.Sprintf("engine: workflow %s was taken over while this process waited for its executor lease: "+
			"this execution runs nothing; the owner continues it", workflowID)}
	}
	return nil
}

// Check implements steps.Fence.
func (f *fence) Check(ctx context.Context, t steps.Ticket) error {
	if err := f.lease.Check(ctx, t.Epoch); err != nil {
		return err
	}
	f.mu.Lock()
	newest := f.current[t.WorkflowID]
	f.mu.Unlock()
	if newest != t.Seq {
		return &TakenOverError{Reason: fmt.Sprintf("engine: a newer execution of workflow %s runs in this process: this one was fenced "+
			"and runs nothing more", t.WorkflowID)}
	}
	return nil
}

// Release implements steps.Fence.
func (f *fence) Release(t steps.Ticket) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.current[t.WorkflowID] == t.Seq {
		delete(f.current, t.WorkflowID)
	}
}
