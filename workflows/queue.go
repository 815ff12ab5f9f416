package workflows

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/recv"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// Step names of a queued run's driver (design §4).
const (
	// NameSegmentStatus reads the DBOS status of a segment that has not
	// reported its outcome for a while.
	NameSegmentStatus = "helix.segment_status"
	// NameLastSegment reads which segment of a queued run came last, in
	// a continuation of its hibernated driver (postgres.LastSegment).
	NameLastSegment = "helix.last_segment"
)

// SegmentCheckInterval is how long a driver waits for a segment's outcome
// before it reads the segment's DBOS status, to notice one that DBOS ended
// without an outcome (cancelled, or out of recovery attempts).
const SegmentCheckInterval = 30 * time.Second

// Admission is how a run is admitted through a DBOS queue: the run's
// active stretches (segments) wait on the queue for a slot, the waits for
// people between them hold none.
type Admission struct {
	// Queue names the DBOS queue.
	Queue string `json:"queue"`
	// PartitionKey is the run's partition of the queue (its tenant): the
	// queue's partition limits apply per key, and the queue serves the
	// partitions in turn.
	PartitionKey string `json:"partitionKey"`
	// Priority orders the queue: lower first, 0 (the default) first of all.
	Priority uint `json:"priority,omitempty"`
}

// SegmentID is the workflow ID of segment k (1, 2, …) of the run whose
// driver is driverID.
func SegmentID(driverID string, k int) string { return fmt.Sprintf("%s%d", SegmentPrefix(driverID), k) }

// SegmentPrefix is what the workflow IDs of the segments of the run whose
// driver is driverID start with: the driver's ID and postgres.SegmentInfix
// (which the store's reads of segments share).
func SegmentPrefix(driverID string) string { return driverID + postgres.SegmentInfix }

// SegmentTopicPrefix starts the DBOS message topics on which segments
// report their outcomes to their drivers.
const SegmentTopicPrefix = "helix.segment."

// segmentTopic is the DBOS message topic on which segment k reports its
// outcome to the driver.
func segmentTopic(k int) string { return fmt.Sprintf("%s%d", SegmentTopicPrefix, k) }

// drive is the driver of a queued run, the run's workflow: it enqueues the
// run's first segment, and after each segment that stopped to wait for a
// person, waits for that person (holding no slot: the driver runs outside
// the queue) and enqueues the next segment, until a segment ends the run.
// A segment reports its outcome by a DBOS message, so the driver waits
// without polling; a segment DBOS ended without one is noticed every
// SegmentCheckInterval.
//
// A driver that has waited steps.Env.HibernateAfter for a person
// hibernates (driverHibernates): its workflow ends, and a wake starts its
// continuation (in.Wake, workflow WakeID(driver, n)), which runs this
// function from where the driver stopped. Where that is comes from the
// run's durable state alone: the run's last segment (postgres.LastSegment,
// SegmentID(driver, k)), whose outcome names the call waited for, its
// deadline and the later calls. The continuation enqueues the next
// segments under the original driver's IDs (a segment's identity, and its
// run's, is the driver's), and they report to the continuation
// (TurnInput.ReportTo), which waits for them with DBOS's Recv as the driver
// did. Messages for the calls are sent to the run's workflow, the original
// driver's: the continuation takes them in a transaction
// (steps.Env.DriverWake), not with Recv.
func drive(ctx dbos.Context, env *steps.Env, self dbos.Workflow[TurnInput, steps.Outcome], in TurnInput, wfID string) (steps.Outcome, error) {
	driver := wfID
	if in.Wake > 0 {
		driver = in.Origin
	}
	if in.Driver != driver {
		// A DBOS fork: from a later step it would replay the original's
		// segments.
		return *steps.ForkRefused(wfID, in.RunID, in.Driver), nil
	}
	q, err := env.Queue(ctx, in.Queue.Queue)
	if err != nil {
		return steps.Outcome{}, err
	}
	opts := []dbos.WorkflowOption{dbos.WithQueue(q), dbos.WithPriority(in.Queue.Priority)}
	if q.GetPartitionQueue() {
		opts = append(opts, dbos.WithQueuePartitionKey(in.Queue.PartitionKey))
	}
	var timedOut string
	var received []string
	var children map[string]steps.Outcome
	k := 1
	if in.Wake > 0 {
		last, a, err := stoppedAt(ctx, env, driver)
		if err != nil {
			return steps.Outcome{}, err
		}
		w, err := driverWake(ctx, env, in.RunID, driver, in.Wake, a)
		if err != nil {
			return steps.Outcome{}, err
		}
		if w.Hibernated {
			return driverHibernated(a), nil
		}
		timedOut, received, k = timedOutCall(a, w), w.Received, last+1
	}
	for ; ; k++ {
		seg := TurnInput{SessionID: in.SessionID, RunID: in.RunID, Segment: k, Driver: driver, Queue: in.Queue,
			TimedOut: timedOut, Received: received, ChildOutcomes: children}
		if wfID != driver {
			seg.ReportTo = wfID
		}
		if _, err := dbos.RunWorkflow(ctx, self, seg, append(opts, dbos.WithWorkflowID(SegmentID(driver, k)))...); err != nil {
			return steps.Outcome{}, fmt.Errorf("enqueue segment %d of run %s on queue %s: %w", k, in.RunID, in.Queue.Queue, err)
		}
		out, err := awaitReport(ctx, env, SegmentID(driver, k), segmentTopic(k))
		if err != nil {
			return steps.Outcome{}, err
		}
		timedOut, received, children = "", nil, nil
		if len(out.Children) > 0 {
			// The step waits for sub-agents that are queued runs of their
			// own: take each one's outcome, for the next segment.
			children = make(map[string]steps.Outcome, len(out.Children))
			for _, c := range out.Children {
				if children[c.ToolCallID], err = awaitReport(ctx, env, c.WorkflowID, c.Topic); err != nil {
					return steps.Outcome{}, err
				}
			}
			continue
		}
		if out.Await == nil {
			if in.Notify != nil {
				// A sub-agent's run: its parent's driver waits for this.
				if err := dbos.Send(ctx, in.Notify.Driver, out, in.Notify.Topic); err != nil {
					return steps.Outcome{}, err
				}
			}
			return out, nil
		}
		a := *out.Await
		if driverHibernates(env, in) {
			w, err := waitOrHibernate(ctx, env, in.RunID, driver, a)
			if err != nil {
				return steps.Outcome{}, err
			}
			if w.Hibernated {
				return driverHibernated(a), nil
			}
			timedOut, received = timedOutCall(a, w), w.Received
			continue
		}
		_, to, err := recv.Wait(ctx, a.ToolCallID, a.DeadlineAt)
		if err != nil {
			return steps.Outcome{}, err
		}
		if to {
			timedOut = a.ToolCallID
		} else {
			received, err = takeLater(ctx, a)
			if err != nil {
				return steps.Outcome{}, err
			}
		}
	}
}

// takeLater takes, after the message of the call a waited for, those of
// its step's later calls that are already there (in order, up to the first
// missing), and returns the calls whose messages were taken.
func takeLater(ctx dbos.Context, a steps.AwaitCall) ([]string, error) {
	received := []string{a.ToolCallID}
	for _, id := range a.Then {
		ok, err := recv.Take(ctx, id)
		if err != nil || !ok {
			return received, err
		}
		received = append(received, id)
	}
	return received, nil
}

// driverHibernates reports whether the driver of in hibernates its waits
// for people: when the engine sets a hibernation delay, unless it drives
// a sub-agent's run (its parent's driver waits for its workflow's outcome,
// awaitReport). A driver that waits for its sub-agents' runs waits in its
// workflow (their reports are sent to it); each of those runs waits for
// people in its own.
func driverHibernates(env *steps.Env, in TurnInput) bool {
	return env.HibernateAfter > 0 && in.Notify == nil
}

// waitOrHibernate waits for the message of the call a, sent to the run's
// workflow driver (this one: the original driver), in DBOS's Recv for at
// most steps.Env.HibernateAfter (and no later than the call's deadline),
// then ends the wait without Recv: the message taken, the deadline, or a
// hibernation (steps.Env.DriverWake).
func waitOrHibernate(ctx dbos.Context, env *steps.Env, runID, driver string, a steps.AwaitCall) (steps.DriverWakeOutput, error) {
	timeout := env.HibernateAfter
	if a.DeadlineAt > 0 {
		now, err := dbos.RunAsStep(ctx, func(context.Context) (int64, error) { return env.Clock.Now().UnixMilli(), nil },
			dbos.WithStepName(recv.NameClock))
		if err != nil {
			return steps.DriverWakeOutput{}, err
		}
		timeout = min(timeout, max(time.Duration(a.DeadlineAt-now)*time.Millisecond, time.Millisecond))
	}
	_, err := dbos.Recv[recv.Message](ctx, recv.Topic(a.ToolCallID), timeout)
	switch {
	case err == nil:
		received, err := takeLater(ctx, a)
		return steps.DriverWakeOutput{Received: received}, err
	case !errors.Is(err, dbos.ErrTimeout):
		return steps.DriverWakeOutput{}, fmt.Errorf("wait for tool call %s: %w", a.ToolCallID, err)
	}
	return driverWake(ctx, env, runID, driver, 0, a)
}

// driverWake ends the wait for the call a of the driver (wake 0) or of its
// continuation wake without Recv (steps.Env.DriverWake), as many times as
// it takes.
func driverWake(ctx dbos.Context, env *steps.Env, runID, driver string, wake int, a steps.AwaitCall) (steps.DriverWakeOutput, error) {
	for {
		stepID, err := dbos.GetStepID(ctx)
		if err != nil {
			return steps.DriverWakeOutput{}, err
		}
		w, err := dbos.RunAsTransaction(ctx, env.DataSource, env.DriverWake(steps.DriverWakeInput{RunID: runID, WorkflowID: driver,
			ToolCallID: a.ToolCallID, DeadlineAt: a.DeadlineAt, Then: a.Then, StepID: stepID, Wake: wake}), dbos.WithStepName(steps.NameDriverWake))
		if err != nil || w.Hibernated || w.TimedOut || len(w.Received) > 0 {
			return w, err
		}
	}
}

// timedOutCall is the call whose wait a driver's wake ended at its
// deadline ("" when it took messages).
func timedOutCall(a steps.AwaitCall, w steps.DriverWakeOutput) (timedOut string) {
	if w.TimedOut {
		return a.ToolCallID
	}
	return ""
}

// driverHibernated is the outcome of a driver (or of a continuation of
// it) that hibernated waiting for the call a.
func driverHibernated(a steps.AwaitCall) steps.Outcome {
	return steps.Outcome{Status: helix.RunSuspendedClientTool, Await: &a, Hibernated: true}
}

// stoppedAt reads where the hibernated driver of the run whose workflow is
// driver stopped: its last segment k, whose outcome names the call it
// waits for.
func stoppedAt(ctx dbos.Context, env *steps.Env, driver string) (k int, a steps.AwaitCall, err error) {
	k, err = dbos.RunAsStep(ctx, outlasting(env, driver, "read the last segment", func(ctx context.Context) (int, error) {
		return postgres.LastSegment(ctx, postgres.PgxQuerier(env.Store.Pool()), driver)
	}), dbos.WithStepName(NameLastSegment), retries)
	if err != nil {
		return 0, a, err
	}
	if k == 0 {
		return 0, a, fmt.Errorf("workflow %s was woken from hibernation but has no segment: DBOS's rows of its segments were deleted; abort the session (helix-dbos sessions abort) and retry it", driver)
	}
	h, err := dbos.RetrieveWorkflow[steps.Outcome](ctx, SegmentID(driver, k))
	if err != nil {
		return 0, a, err
	}
	out, err := h.GetResult()
	if err != nil {
		return 0, a, err
	}
	if out.Await == nil {
		return 0, a, fmt.Errorf("workflow %s was woken from hibernation but its last segment %d waits for no call (status %s): abort the session (helix-dbos sessions abort) and retry it",
			driver, k, out.Status)
	}
	return k, *out.Await, nil
}

// awaitReport waits for the outcome the workflow id reports on topic: a
// segment's, or a sub-agent's queued run's. A workflow that DBOS ended
// without reporting is noticed every SegmentCheckInterval: one that
// succeeded (a sub-agent's run started without a parent to report to, by a
// process that found it recorded but not started) is read back; one
// cancelled or failed stops the run.
func awaitReport(ctx dbos.Context, env *steps.Env, id, topic string) (steps.Outcome, error) {
	for {
		out, err := dbos.Recv[steps.Outcome](ctx, topic, SegmentCheckInterval)
		if err == nil {
			return out, nil
		}
		if !errors.Is(err, dbos.ErrTimeout) {
			return steps.Outcome{}, fmt.Errorf("wait for workflow %s: %w", id, err)
		}
		st, err := dbos.RunAsStep(ctx, outlasting(env, id, "read the status of workflow "+id, func(ctx context.Context) (string, error) {
			status, found, err := postgres.ReadWorkflowStatus(ctx, postgres.PgxQuerier(env.Store.Pool()), id)
			if err == nil && !found {
				err = fmt.Errorf("workflow %s has no status row in DBOS's system database", id)
			}
			return status, err
		}), dbos.WithStepName(NameSegmentStatus), retries)
		if err != nil {
			return steps.Outcome{}, err
		}
		switch st {
		case "PENDING", "ENQUEUED", "DELAYED":
		case "SUCCESS":
			h, err := dbos.RetrieveWorkflow[steps.Outcome](ctx, id)
			if err != nil {
				return steps.Outcome{}, err
			}
			return h.GetResult()
		default:
			return steps.Outcome{}, fmt.Errorf("workflow %s of this run ended %s without an outcome (cancelled or failed through DBOS): "+
				"the run stops here; abort the session (helix-dbos sessions abort) and retry it", id, st)
		}
	}
}

// report sends a segment's outcome to its driver (or to the continuation
// of its hibernated driver that enqueued it).
func report(ctx dbos.Context, in TurnInput, out steps.Outcome) error {
	return dbos.Send(ctx, reportTo(in), out, segmentTopic(in.Segment))
}

// reportTo is the workflow segment in reports to.
func reportTo(in TurnInput) string { return cmp.Or(in.ReportTo, in.Driver) }

// awaitOutcome is a segment's outcome for a call it would wait for, then
// the later calls of its step that wait too.
func awaitOutcome(step int, toolCallID string, deadlineAt int64, then []string) steps.Outcome {
	return steps.Outcome{Status: helix.RunSuspendedClientTool, Steps: step,
		Await: &steps.AwaitCall{ToolCallID: toolCallID, DeadlineAt: deadlineAt, Then: then}}
}

// outlasting makes the body of a driver's DBOS step that reads the
// database wait out an outage (postgres.WaitOut), for as long as the
// workflow lives, instead of failing after the step's retries (about three
// seconds): the driver's error would end its workflow failed in DBOS and
// leave its run running, with nothing to run it.
func outlasting[R any](env *steps.Env, wfID, what string, fn func(context.Context) (R, error)) func(context.Context) (R, error) {
	return func(ctx context.Context) (out R, err error) {
		err = postgres.WaitOut(ctx, func() (err error) {
			out, err = fn(ctx)
			return err
		}, postgres.LogOutage(env.Log, wfID, what))
		return out, err
	}
}
