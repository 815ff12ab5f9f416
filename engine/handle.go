package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store"
)

// Handle observes and controls one run. Handles are cheap values: Engine.Run
// rebuilds one from IDs in any process.
type Handle struct {
	SessionID  string
	RunID      string
	WorkflowID string
	e          *Engine
}

// Run returns a handle on an existing run of a session (the latest when
// runID is empty).
func (e *Engine) Run(ctx context.Context, sessionID, runID string) (*Handle, error) {
	var run *store.Run
	var err error
	if runID == "" {
		run, err = e.store.GetCurrentRun(ctx, sessionID)
	} else {
		run, err = e.store.GetRun(ctx, runID)
	}
	if err != nil {
		return nil, err
	}
	if run.SessionID != sessionID {
		return nil, fmt.Errorf("engine: run %s belongs to session %s, not %s", run.RunID, run.SessionID, sessionID)
	}
	return &Handle{SessionID: sessionID, RunID: run.RunID, WorkflowID: run.WorkflowID, e: e}, nil
}

// Result waits until the run ends (completed, failed or interrupted) or
// suspends on human input (one of the suspended_* statuses, with
// Suspended saying what it waits for), and returns its outcome, or returns
// ctx's error. Await waits through suspensions. It reads the durable run
// record, so it works from any process and after restarts.
//
// It waits for the run's status changes, which Postgres announces
// (NOTIFY on RunStatusChannel), and reads the run record again on each, and
// at least every ResultPollInterval should a notification be lost.
func (h *Handle) Result(ctx context.Context) (helix.AgentResult, error) {
	wake, stop, err := h.e.store.Watch(RunStatusChannel, h.RunID)
	if err != nil {
		return helix.AgentResult{}, err
	}
	defer stop()
	for {
		run, err := h.e.store.GetRun(ctx, h.RunID)
		if err != nil {
			return helix.AgentResult{}, err
		}
		if run.Status.Final() || run.Status.Suspended() {
			return h.result(ctx, run)
		}
		timer := time.NewTimer(ResultPollInterval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return helix.AgentResult{}, ctx.Err()
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// RunStatusChannel is the Postgres NOTIFY channel on which a run's status
// changes are announced (the payload is the run ID).
const RunStatusChannel = "helix_run_status"

// ResultPollInterval bounds how long Handle.Result goes without reading
// the run record when no status change is announced.
const ResultPollInterval = time.Second

// Await waits until the run ends — completed, failed or interrupted —
// through any suspensions on human input, and returns its outcome (Result
// returns at once when the run suspends). It reads the durable run record,
// like Result, so it works from any process; while the run is suspended it
// waits for the run's next status change (or ResultPollInterval).
func (h *Handle) Await(ctx context.Context) (helix.AgentResult, error) {
	wake, stop, err := h.e.store.Watch(RunStatusChannel, h.RunID)
	if err != nil {
		return helix.AgentResult{}, err
	}
	defer stop()
	for {
		res, err := h.Result(ctx)
		if err != nil || !res.Status.Suspended() {
			return res, err
		}
		timer := time.NewTimer(ResultPollInterval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return res, ctx.Err()
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

func (h *Handle) result(ctx context.Context, run *store.Run) (helix.AgentResult, error) {
	res := helix.AgentResult{SessionID: h.SessionID, RunID: h.RunID, Status: helix.RunStatusToAgentStatus(run.Status), Error: run.Error}
	if run.Status.Final() && run.WorkflowID != "" {
		// The run record is final once the last commit lands; the workflow
		// still fires the closing hooks. Wait for it, so a caller that shuts
		// down after Result does not leave them pending.
		out, err := h.workflowOutcome(ctx, run.CurrentWorkflowID())
		if err != nil {
			return res, err
		}
		res.ErrorCode = out.Code
	}
	if run.Status.Suspended() {
		s, err := h.suspension(ctx, run.Status)
		if err != nil {
			return res, err
		}
		res.Suspended = s
	}
	if run.Status == helix.RunCompleted {
		st, err := h.e.store.LoadState(ctx, h.SessionID)
		if err != nil {
			return res, err
		}
		res.Output = st.Output
	}
	return res, nil
}

// workflowOutcome waits for the run's workflow to finish. A workflow that
// ended in error or was cancelled (abort) yields a zero outcome: the run
// record already says how the run ended.
func (h *Handle) workflowOutcome(ctx context.Context, workflowID string) (steps.Outcome, error) {
	wh, err := dbos.RetrieveWorkflow[steps.Outcome](h.e.dbos, workflowID)
	if err != nil {
		return steps.Outcome{}, nil // not started here (e.g. an orphan started elsewhere): nothing to wait for
	}
	done := make(chan steps.Outcome, 1)
	go func() {
		out, _ := wh.GetResult(dbos.WithHandlePollingInterval(10 * time.Millisecond))
		done <- out
	}()
	select {
	case out := <-done:
		return out, nil
	case <-ctx.Done():
		return steps.Outcome{}, ctx.Err()
	}
}

// Stream returns the run's chunks live, from the run's first chunk, ending
// after the chunk that ends the run: stream_end, the error chunk of a failed
// run, or run_interrupted. The iterator yields an error once and stops when
// reading fails or ctx ends. Chunks are read from Postgres: any process can
// stream any run.
func (h *Handle) Stream(ctx context.Context) iter.Seq2[store.StoredChunk, error] {
	return func(yield func(store.StoredChunk, error) bool) {
		run, err := h.e.store.GetRun(ctx, h.RunID)
		if err != nil {
			yield(store.StoredChunk{}, err)
			return
		}
		st, err := h.e.store.LoadState(ctx, h.SessionID)
		if err != nil {
			yield(store.StoredChunk{}, err)
			return
		}
		r, err := h.e.store.NewReader(ctx, st.StreamID, &store.ReaderOptions{FromSequence: run.StartSequence})
		if err != nil {
			yield(store.StoredChunk{}, err)
			return
		}
		defer func() { _ = r.Close() }()
		for {
			c, err := r.Next(ctx)
			if errors.Is(err, io.EOF) {
				return
			}
			var failed *helix.StreamFailedError
			if errors.As(err, &failed) {
				return // the error chunk was the last one yielded
			}
			if err != nil {
				yield(store.StoredChunk{}, err)
				return
			}
			if !yield(c, nil) {
				return
			}
			if ends(c, h.RunID) {
				return
			}
		}
	}
}

// ends reports whether c is the last chunk of the run.
func ends(c store.StoredChunk, runID string) bool {
	switch ch := c.Chunk.(type) {
	case *helix.StreamEnd:
		return true
	case *helix.RunInterruptedChunk:
		return ch.RunID == runID
	case *helix.ErrorChunk:
		return c.RunID == runID
	}
	return false
}

// State returns the session's stored state.
func (h *Handle) State(ctx context.Context) (*store.SessionState, error) {
	return h.e.store.LoadState(ctx, h.SessionID)
}

// Abort stops the run now and fails it with reason (see Engine.Abort).
func (h *Handle) Abort(ctx context.Context, reason string) error {
	return h.e.Abort(ctx, h.SessionID, reason)
}

// CanResume reports whether the session can be resumed.
func (h *Handle) CanResume(ctx context.Context) (helix.CanResumeResult, error) {
	return h.e.CanResume(ctx, h.SessionID)
}

// Resume continues the interrupted session (see Engine.Resume).
func (h *Handle) Resume(ctx context.Context, opts *ResumeOptions) (*Handle, error) {
	return h.e.Resume(ctx, h.SessionID, opts)
}

// Retry runs the session again from a checkpoint or from the start (see
// Engine.Retry).
func (h *Handle) Retry(ctx context.Context, opts *RetryOptions) (*Handle, error) {
	return h.e.Retry(ctx, h.SessionID, opts)
}
