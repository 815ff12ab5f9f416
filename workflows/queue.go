package workflows

import (
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
func drive(ctx dbos.Context, env *steps.Env, self dbos.Workflow[TurnInput, steps.Outcome], in TurnInput, wfID string) (steps.Outcome, error) {
	if in.Driver != wfID {
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
	for k := 1; ; k++ {
		seg := TurnInput{SessionID: in.SessionID, RunID: in.RunID, Segment: k, Driver: wfID, Queue: in.Queue,
			TimedOut: timedOut, Received: received, ChildOutcomes: children}
		if _, err := dbos.RunWorkflow(ctx, self, seg, append(opts, dbos.WithWorkflowID(SegmentID(wfID, k)))...); err != nil {
			return steps.Outcome{}, fmt.Errorf("enqueue segment %d of run %s on queue %s: %w", k, in.RunID, in.Queue.Queue, err)
		}
		out, err := awaitReport(ctx, env, SegmentID(wfID, k), segmentTopic(k))
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
		a := out.Await
		_, to, err := recv.Wait(ctx, a.ToolCallID, a.DeadlineAt)
		if err != nil {
			return steps.Outcome{}, err
		}
		if to {
			timedOut = a.ToolCallID
		} else {
			received = append(received, a.ToolCallID)
		}
		for _, id := range a.Then {
			ok, err := recv.Take(ctx, id)
			if err != nil {
				return steps.Outcome{}, err
			}
			if !ok {
				break
			}
			received = append(received, id)
		}
	}
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
		st, err := dbos.RunAsStep(ctx, func(ctx context.Context) (string, error) {
			status, found, err := postgres.ReadWorkflowStatus(ctx, postgres.PgxQuerier(env.Store.Pool()), id)
			if err == nil && !found {
				err = fmt.Errorf("workflow %s has no status row in DBOS's system database", id)
			}
			return status, err
		}, dbos.WithStepName(NameSegmentStatus), retries)
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

// report sends a segment's outcome to its driver.
func report(ctx dbos.Context, in TurnInput, out steps.Outcome) error {
	return dbos.Send(ctx, in.Driver, out, segmentTopic(in.Segment))
}

// awaitOutcome is a segment's outcome for a call it would wait for, then
// the later calls of its step that wait too.
func awaitOutcome(step int, toolCallID string, deadlineAt int64, then []string) steps.Outcome {
	return steps.Outcome{Status: helix.RunSuspendedClientTool, Steps: step,
		Await: &steps.AwaitCall{ToolCallID: toolCallID, DeadlineAt: deadlineAt, Then: then}}
}
