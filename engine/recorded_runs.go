package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/helix-agents/helix-dbos/store/postgres"
	"github.com/helix-agents/helix-dbos/workflows"
)

// recordedBacklog is how many announced runs wait for the starter before
// further announcements fall back to a sweep.
const recordedBacklog = 1024

// startRecordedRuns starts the starter of recorded runs; stop the returned
// loop at Shutdown, before DBOS. It starts
//   - the run named by each announcement on postgres.RunRecordedChannel
//     (ExecuteTx's, sent by Postgres when the caller's transaction commits),
//     at once;
//   - every recorded run that has no workflow (postgres.ListOrphanRuns) every
//     Config.RecordedRunSweepInterval, and whenever announcements may have
//     been missed: the LISTEN connection (re)connected, or more arrived than
//     the backlog holds.
//
// Every engine does this; of several that start one run, one workflow runs:
// its ID is deterministic, and DBOS's RunWorkflow inserts the workflow's row
// with ON CONFLICT, so the others' calls find it and return without running
// it.
func (e *Engine) startRecordedRuns(ctx context.Context) (*loop, error) {
	sweep := make(chan struct{}, 1)
	announced := make(chan string, recordedBacklog)
	stopWatch, err := e.store.WatchPayloads(postgres.RunRecordedChannel, func(runID string) {
		if runID == "" {
			poke(sweep)
			return
		}
		select {
		case announced <- runID:
		default:
			poke(sweep)
		}
	})
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l := &loop{cancel: cancel}
	// The runs of agents this engine does not register, warned about once
	// each (the sweep sees them every interval until an engine that
	// registers their agent starts them).
	warned := map[string]bool{}
	l.wg.Go(func() {
		defer stopWatch()
		t := time.NewTicker(e.cfg.RecordedRunSweepInterval)
		defer t.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case runID := <-announced:
				e.startAnnounced(lctx, runID)
				continue
			case <-sweep:
			case <-t.C:
				// Hibernated runs whose deadline passed wake (announced
				// on the channel this loop listens to).
				if _, err := postgres.WakeDue(lctx, postgres.PgxQuerier(e.pool), e.env.Clock.Now()); err != nil && lctx.Err() == nil {
					e.log.Warn().Err(err).Str("event", "run.wake_sweep_failed").
						Msg("could not wake the hibernated runs whose deadline passed; retrying at the next sweep")
				}
			}
			if err := e.startOrphans(lctx, warned); err != nil && lctx.Err() == nil {
				e.log.Warn().Err(err).Str("event", "run.orphan_sweep_failed").
					Msg("could not start the recorded runs that have no workflow; retrying at the next sweep")
			}
		}
	})
	return l, nil
}

// poke wakes c's reader, coalesced.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// startAnnounced starts what an announcement on postgres.RunRecordedChannel
// names, if this engine registers its agent: a woken run's continuation
// (startWoken), or the recorded run runID if it still has no workflow.
func (e *Engine) startAnnounced(ctx context.Context, runID string) {
	if o, ok := postgres.ParseWakeAnnouncement(runID); ok {
		e.startWoken(ctx, o, false)
		return
	}
	o, ok, err := postgres.GetOrphanRun(ctx, postgres.PgxQuerier(e.pool), runID)
	if err == nil && ok {
		err = e.startOrphan(o, true, nil)
	}
	if err != nil && ctx.Err() == nil {
		e.log.Warn().Err(err).Str("event", "run.recorded_start_failed").Str("runId", runID).
			Msg("could not start a run recorded in an application's transaction; the sweep retries")
	}
}

// startWoken starts continuation o.Wake of the hibernated run o, woken by a
// message: submitted, just after this engine's submission that woke it
// committed (Engine.SubmitToolResult), at once; else on hearing the wake's
// announcement, unless DBOS has the continuation's workflow already (the
// submitting engine's, or another engine's that heard it too): starting
// it again would cost DBOS a write, to learn that it exists; nor when a
// submission of this engine to the run is in flight (wakeHolds): that
// submission starts what it woke. Of starts
// that race, one runs the workflow (its ID is deterministic). A start that
// fails is logged; the sweep (postgres.ListOrphanRuns) retries it.
func (e *Engine) startWoken(ctx context.Context, o postgres.OrphanRun, submitted bool) {
	var err error
	if !submitted && e.submitting.leave(o) {
		return // the submission in flight starts it (control.submit)
	}
	if !submitted {
		var started bool
		_, started, err = postgres.ReadWorkflowStatus(ctx, postgres.PgxQuerier(e.pool), workflows.WakeID(o.WorkflowID, o.Wake))
		if err == nil && started {
			return
		}
	}
	if err == nil {
		err = e.startOrphan(o, true, nil)
	}
	if err != nil && ctx.Err() == nil {
		e.log.Warn().Err(err).Str("event", "run.wake_start_failed").Str("sessionId", o.SessionID).Str("runId", o.RunID).Int("wake", o.Wake).
			Msg("could not start the continuation of a run woken from hibernation; the sweep retries")
	}
}

// startOrphans starts the workflow of every running run that has none
// (postgres.ListOrphanRuns) whose agent this engine registers. Safe to run
// from several processes: workflow IDs are deterministic and DBOS starts a
// workflow ID once. warned, when not nil, holds the runs of other agents
// already warned about (the periodic sweep's); nil warns of each.
func (e *Engine) startOrphans(ctx context.Context, warned map[string]bool) error {
	orphans, err := postgres.ListOrphanRuns(ctx, postgres.PgxQuerier(e.pool))
	if err != nil {
		return err
	}
	var errs []error
	seen := make(map[string]bool, len(orphans))
	for _, o := range orphans {
		seen[o.RunID] = true
		if err := e.startOrphan(o, false, warned); err != nil {
			errs = append(errs, err)
		}
	}
	for id := range warned {
		if !seen[id] {
			delete(warned, id) // started elsewhere, or gone
		}
	}
	return errors.Join(errs...)
}

// startOrphan starts o's workflow, admitted as recorded with the run
// whatever this engine's queue, unless this engine does not register o's
// agent. announced: o was announced at its commit (its start is the normal
// path, not a recovery).
func (e *Engine) startOrphan(o postgres.OrphanRun, announced bool, warned map[string]bool) error {
	if _, err := e.env.Agent(o.AgentType); err != nil {
		// Started here it would fail for want of its agent; a process
		// that registers the agent starts it.
		if !announced && !warned[o.RunID] {
			e.log.Warn().Str("event", "run.orphan_skipped").Str("sessionId", o.SessionID).Str("runId", o.RunID).Str("agent", o.AgentType).
				Msg("a recorded run whose workflow was never started belongs to an agent this process does not register: left for a process that does")
		}
		if warned != nil {
			warned[o.RunID] = true
		}
		return nil
	}
	var adm *workflows.Admission
	if o.Queue != "" {
		adm = &workflows.Admission{Queue: o.Queue, PartitionKey: o.PartitionKey, Priority: uint(max(o.Priority, 0))}
	}
	if o.Wake > 0 {
		e.log.Debug().Str("event", "run.woken").Str("sessionId", o.SessionID).Str("runId", o.RunID).Int("wake", o.Wake).
			Msg("starting a run woken from hibernation")
		return e.startWake(o.SessionID, o.RunID, o.WorkflowID, o.Wake, adm)
	}
	if announced {
		e.log.Debug().Str("event", "run.recorded_started").Str("sessionId", o.SessionID).Str("runId", o.RunID).
			Msg("starting a run recorded in an application's transaction")
	} else {
		e.log.Warn().Str("event", "run.orphan_started").Str("sessionId", o.SessionID).Str("runId", o.RunID).
			Msg("starting a recorded run whose workflow was never started")
	}
	return e.start(o.SessionID, o.RunID, o.WorkflowID, adm)
}

// wakeHolds counts, by workflow ID, this engine's submissions in flight
// to the run of that workflow: each starts the continuation of the run it
// wakes once it committed, so the starter, hearing of that wake (often
// before the submission's caller hears of its commit), leaves it to it
// rather than start it too. A wake the starter left that no submission
// woke (the deadline sweep's, meanwhile) is handed to the last release.
// The zero value is ready.
type wakeHolds struct {
	mu sync.Mutex
	m  map[string]*wakeHold
}

type wakeHold struct {
	n    int
	left []postgres.OrphanRun // wakes the starter left to the holders
}

// hold records a submission in flight to workflow wf's run, until the
// returned release, which returns the wakes the starter left meanwhile
// (to the last holder).
func (h *wakeHolds) hold(wf string) (release func() (left []postgres.OrphanRun)) {
	h.mu.Lock()
	if h.m == nil {
		h.m = map[string]*wakeHold{}
	}
	w := h.m[wf]
	if w == nil {
		w = &wakeHold{}
		h.m[wf] = w
	}
	w.n++
	h.mu.Unlock()
	return func() []postgres.OrphanRun {
		h.mu.Lock()
		defer h.mu.Unlock()
		if w.n--; w.n > 0 {
			return nil
		}
		delete(h.m, wf)
		return w.left
	}
}

// leave reports whether a submission to o's workflow is in flight, and
// then leaves the wake o to it.
func (h *wakeHolds) leave(o postgres.OrphanRun) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.m[o.WorkflowID]
	if w == nil {
		return false
	}
	w.left = append(w.left, o)
	return true
}
