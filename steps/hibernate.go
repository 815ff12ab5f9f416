package steps

import (
	"context"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/helix-agents/helix-dbos/recv"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// NameHibernate is the transaction step a run that waits for people runs
// when it has waited Env.HibernateAfter: it hibernates the run, unless a
// message came meanwhile (postgres.HibernateRun).
const NameHibernate = "helix.hibernate"

// DefaultHibernateAfter is how long a run waits for people in its workflow
// before it hibernates, when the engine sets no other value: answers
// within it wake the run as fast as a live wait does, and a longer wait
// leaves no goroutine and no memory behind.
const DefaultHibernateAfter = time.Minute

// HibernateInput is what a hibernating run waits for.
type HibernateInput struct {
	RunID string `json:"runId"`
	// WorkflowID is the run's workflow, the messages' destination.
	WorkflowID string `json:"workflowId"`
	// ToolCallIDs are the calls the run waits for.
	ToolCallIDs []string `json:"toolCallIds"`
	// WakeAt is the earliest of their deadlines (Unix ms), 0 for none.
	WakeAt int64 `json:"wakeAt,omitempty"`
	// Wake numbers the execution's continuation of the run (0: the run's
	// workflow itself).
	Wake int `json:"wake,omitempty"`
}

// HibernateOutput reports whether the run hibernated.
type HibernateOutput struct {
	Hibernated bool `json:"hibernated"`
	// implied is set by Hibernate when the run hibernated: the run's row
	// records it (RecordImplied). HibernateForChildren leaves it unset: its
	// transaction also records the step and the children it waits for,
	// which a replay must not write again, so its record is kept.
	implied bool
}

// RecordImplied reports a hibernation by Hibernate, whose record the
// workflows' journal does not write: the run's row says it hibernated, and
// a replay that gets there (its workflow's end unrecorded) finds the run
// asleep or woken since and hibernates again, writing nothing
// (postgres.HibernateRun, postgres.Answer.Asleep). A hibernated session
// keeps one journal row less.
func (o HibernateOutput) RecordImplied() bool { return o.implied }

// Hibernate returns the transaction that hibernates a run (see
// postgres.HibernateRun): in it, a message to one of the calls keeps the
// run waiting in its workflow; otherwise any later message, or the
// deadline, wakes it in a continuation.
func (e *Env) Hibernate(in HibernateInput) dbos.Txn[HibernateOutput] {
	return func(ctx context.Context, tx dbos.Tx) (HibernateOutput, error) {
		topics := make([]string, len(in.ToolCallIDs))
		for i, id := range in.ToolCallIDs {
			topics[i] = recv.Topic(id)
		}
		ok, err := postgres.HibernateRun(ctx, txQuerier{tx}, in.RunID, in.WorkflowID, in.Wake, topics, in.WakeAt)
		return HibernateOutput{Hibernated: ok, implied: ok}, err
	}
}

// NameHibernateForChildren is the transaction step a run whose step waits
// for sub-agents that hibernated runs: it records the step and the children
// it waits for, and hibernates the run until one of them ends
// (postgres.HibernateForChildren).
const NameHibernateForChildren = "helix.hibernate_for_children"

// ChildHibernateInput is a step that waits for sub-agents that hibernated.
type ChildHibernateInput struct {
	// Wait is the step's record and every child it waits for (those that
	// hibernated, and those that ended interrupted, whose fate the step
	// decides once the others ended).
	Wait ChildWaitInput `json:"wait"`
	// Asleep are the sessions of the children whose runs hibernated: the
	// end of any of them wakes the run.
	Asleep []string `json:"asleep"`
}

// HibernateForChildren returns the transaction that records a step waiting
// for sub-agents that hibernated, and hibernates its run until one of them
// ends; when one ended already, the run is woken at once, and its
// continuation takes the child's result. Either way the workflow ends.
func (e *Env) HibernateForChildren(in ChildHibernateInput) dbos.Txn[HibernateOutput] {
	save := e.SaveChildWait(in.Wait)
	return func(ctx context.Context, tx dbos.Tx) (HibernateOutput, error) {
		woken, err := postgres.HibernateForChildren(ctx, txQuerier{tx}, in.Wait.Run.RunID, in.Asleep, func() error {
			_, err := save(ctx, tx)
			return err
		})
		if err != nil {
			return HibernateOutput{}, err
		}
		if woken {
			e.Log.Info().Ctx(ctx).Str("event", "run.woken_at_once").Str("sessionId", in.Wait.Run.SessionID).Str("runId", in.Wait.Run.RunID).
				Msg("a sub-agent the run would hibernate for ended meanwhile: the run goes on in its next continuation")
		}
		return HibernateOutput{Hibernated: true}, nil
	}
}

// NameDriverWake is the transaction step of a queued run's driver whose
// wait for a person reached Env.HibernateAfter, and the first one of a
// continuation of a hibernated driver: it takes the message of the call
// the driver waits for, or ends the wait at the call's deadline, or
// hibernates the run (DriverWake).
const NameDriverWake = "helix.driver_wake"

// DriverWakeInput is the call a queued run's driver waits for (the
// steps.AwaitCall of its last segment's outcome).
type DriverWakeInput struct {
	RunID string `json:"runId"`
	// WorkflowID is the run's workflow (the original driver's), the
	// messages' destination.
	WorkflowID string `json:"workflowId"`
	ToolCallID string `json:"toolCallId"`
	// DeadlineAt is the call's deadline (Unix ms, on Env.Clock), 0 for
	// none.
	DeadlineAt int64 `json:"deadlineAt,omitempty"`
	// Then are the step's later calls that wait too: with the call's
	// message, those of theirs already there are taken as well.
	Then []string `json:"then,omitempty"`
	// StepID names the step that takes the messages (DBOS's
	// consumed_by_function_id).
	StepID int `json:"stepId"`
	// Wake numbers the continuation that runs the transaction (0: the
	// driver itself): it records that the continuation began
	// (postgres.BeginContinuation).
	Wake int `json:"wake,omitempty"`
}

// DriverWakeOutput is how a driver's wait ended: the messages it took
// (the call's, then those of Then already there, in order), its
// deadline (TimedOut), or a hibernation. None of them set: a message
// came while the run hibernated and went before this transaction could
// take it, which does not happen while the driver is the messages' only
// taker; wait again.
type DriverWakeOutput struct {
	Received   []string `json:"received,omitempty"`
	TimedOut   bool     `json:"timedOut,omitempty"`
	Hibernated bool     `json:"hibernated,omitempty"`
}

// DriverWake returns the transaction that ends a queued run's driver's
// wait for a person without a goroutine waiting for the message: a message
// for the call is taken (with those of the later calls already there), a
// deadline that passed (on Env.Clock) ends the wait, and otherwise the run
// hibernates as a root run does (postgres.HibernateRun, under the run's
// row lock: a message that commits after it wakes the run, whose
// continuation runs this transaction again).
func (e *Env) DriverWake(in DriverWakeInput) dbos.Txn[DriverWakeOutput] {
	return func(ctx context.Context, tx dbos.Tx) (DriverWakeOutput, error) {
		if in.Wake > 0 {
			if err := postgres.BeginContinuation(ctx, txQuerier{tx}, in.RunID, in.Wake); err != nil {
				return DriverWakeOutput{}, err
			}
		}
		passed := in.DeadlineAt > 0 && e.Clock.Now().UnixMilli() >= in.DeadlineAt
		if !passed {
			ok, err := postgres.HibernateRun(ctx, txQuerier{tx}, in.RunID, in.WorkflowID, in.Wake, []string{recv.Topic(in.ToolCallID)}, in.DeadlineAt)
			if err != nil || ok {
				return DriverWakeOutput{Hibernated: ok}, err
			}
		}
		var out DriverWakeOutput
		took, err := recv.Consume[dbos.Row](ctx, tx, in.WorkflowID, in.ToolCallID, in.StepID)
		switch {
		case err != nil:
			return DriverWakeOutput{}, err
		case !took:
			return DriverWakeOutput{TimedOut: passed}, nil
		}
		out.Received = append(out.Received, in.ToolCallID)
		for _, id := range in.Then {
			took, err := recv.Consume[dbos.Row](ctx, tx, in.WorkflowID, id, in.StepID)
			if err != nil {
				return DriverWakeOutput{}, err
			}
			if !took {
				break
			}
			out.Received = append(out.Received, id)
		}
		return out, nil
	}
}
