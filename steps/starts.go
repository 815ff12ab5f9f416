package steps

import (
	"context"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// StartChunksDelay is how long a step's held start chunks (step_start and
// its tool_starts, see HeldStarts) wait for the step's commit: when the
// step's tools still run after it, the chunks are written at once, so a
// live reader sees a slow tool start within this delay. Steps whose tools
// end sooner write them with their commit, which saves a chunk row, its
// index entry and an update of the stream per step.
const StartChunksDelay = 100 * time.Millisecond

// StartChunks returns a step's own chunks: step_start, then a tool_start
// per call in the model's order (__finish__ has none). A step writes them
// once per committed model call; a replay rebuilds the same ones from the
// recorded model output.
func StartChunks(run RunInfo, step int, def *AgentDef, res helix.StepResult) []helix.Chunk {
	return append([]helix.Chunk{stepStartChunk(run, step)}, toolStartChunks(run, step, def, res)...)
}

func stepStartChunk(run RunInfo, step int) *helix.StepStartChunk {
	return &helix.StepStartChunk{Base: base(run, step), StepID: StepID(run.RunID, step)}
}

func toolStartChunks(run RunInfo, step int, def *AgentDef, res helix.StepResult) []helix.Chunk {
	var out []helix.Chunk
	for _, call := range res.ToolCalls {
		if helix.IsFinishTool(call.Name) {
			continue
		}
		args := call.Arguments
		if len(args) == 0 {
			args = []byte("{}")
		}
		start := &helix.ToolStartChunk{Base: base(run, step), ToolCallID: call.ID, ToolName: call.Name, Arguments: args}
		if tool, ok := def.Tools[call.Name]; ok && tool.ExecutesOnClient() {
			client := false
			start.ProviderExecuted = &client
		}
		out = append(out, start)
	}
	return out
}

// HeldStarts are a step's start chunks held back from the model call's
// record for the step's commit (the model record must be durable before a
// tool runs; its chunks need not be). The workflow holds them only for a
// step whose calls all run as in-process tools (no sub-agent, companion,
// client tool or approval writes to the stream during the step), and they
// precede every other chunk of the step:
//
//   - a tool's first Emit writes them first (Flush, under the mutex: tools
//     run in parallel);
//   - after StartChunksDelay they are written at once, fenced like the
//     step's other writes (Env.Check);
//   - otherwise the commit writes them first among its chunks (Take).
//
// A crash before they are written loses them with the step's other
// unrecorded work; the replay rebuilds them (RestoreStarts). Methods are
// safe on a nil *HeldStarts (nothing held) and from several goroutines.
type HeldStarts struct {
	env  *Env
	run  RunInfo
	step int

	mu sync.Mutex
	// chunks are the chunks still to write; nil once written or taken.
	chunks []helix.Chunk
	// uncertain is set after a write failed: it may have committed before
	// its acknowledgement was lost, so the next write looks first.
	uncertain bool
	timer     *time.Timer
}

// HoldStarts holds chunks, step's start chunks, for the step's commit and
// arms the StartChunksDelay timer, which writes them under ctx (the
// workflow's: a cancelled workflow writes nothing).
func (e *Env) HoldStarts(ctx context.Context, run RunInfo, step int, chunks []helix.Chunk) *HeldStarts {
	h := &HeldStarts{env: e, run: run, step: step, chunks: chunks}
	// The timer's Flush takes h.mu, which orders it after this assignment
	// for the methods that read h.timer (they run after HoldStarts returns).
	h.timer = time.AfterFunc(StartChunksDelay, func() {
		if err := h.Flush(ctx); err != nil && ctx.Err() == nil {
			e.Log.Warn().Ctx(ctx).Str("event", "stream.step_start_delayed").Str("sessionId", run.SessionID).
				Str("runId", run.RunID).Int("step", step).Err(err).
				Msg("could not write the step's start chunks while its tools run; they go out with the step's next write")
		}
	})
	return h
}

// Flush writes the held chunks now, if they are not written yet: before a
// tool's event, or when the step's tools outlast StartChunksDelay. It fails
// when this execution no longer owns the run (Env.Check).
func (h *HeldStarts) Flush(ctx context.Context) error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.chunks == nil {
		return nil
	}
	if err := h.env.Check(ctx, h.run.Ticket); err != nil {
		return err
	}
	if h.uncertain {
		if written, err := h.env.startsWritten(ctx, h.run, h.step); err != nil || written {
			if written {
				h.chunks = nil
			}
			return err
		}
	}
	if _, err := h.env.Store.Append(ctx, h.run.StreamID, fencedWrites(h.run, h.chunks)); err != nil {
		h.uncertain = true
		return fenced(h.run, err)
	}
	h.chunks = nil
	return nil
}

// ChunkWrites returns chunks as writes of run runID.
func ChunkWrites(runID string, chunks []helix.Chunk) []store.ChunkWrite {
	w := make([]store.ChunkWrite, len(chunks))
	for i, c := range chunks {
		w[i] = store.ChunkWrite{RunID: runID, Chunk: c}
	}
	return w
}

// fencedWrites is ChunkWrites for an append outside the step's commit:
// fenced by the run's execution (RunInfo.StreamFence).
func fencedWrites(run RunInfo, chunks []helix.Chunk) []store.ChunkWrite {
	w, f := ChunkWrites(run.RunID, chunks), run.StreamFence()
	for i := range w {
		w[i].Fence = f
	}
	return w
}

// Take stops the timer and returns the chunks not written yet, for the
// step's commit to write first (nil when they are written). After a failed
// write it first looks whether that write committed. Later Flushes write
// nothing.
func (h *HeldStarts) Take() dbos.Step[[]helix.Chunk] {
	return func(ctx context.Context) ([]helix.Chunk, error) {
		if h == nil {
			return nil, nil
		}
		h.timer.Stop()
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.uncertain && h.chunks != nil {
			written, err := h.env.startsWritten(ctx, h.run, h.step)
			if err != nil {
				return nil, err
			}
			if written {
				h.chunks = nil
			}
		}
		out := h.chunks
		h.chunks = nil
		return out, nil
	}
}

// Stop stops the timer and drops the chunks not written (a step that ends
// without a commit: a failure ends the run with its own chunks), waiting
// for a write under way.
func (h *HeldStarts) Stop() {
	if h == nil {
		return
	}
	h.timer.Stop()
	h.mu.Lock()
	h.chunks = nil
	h.mu.Unlock()
}

// RestoreStarts is the step a replay runs when it finds the model record
// of a step that held its start chunks but not the step's commit: the lost
// execution may have written them (its timer, or a tool's event, did) or
// not (they waited for the commit). It writes chunks (StartChunks, rebuilt
// from the recorded output) unless the stream holds a chunk of the step
// already, so each is in the stream once, before the chunks the step's
// tools write now. It reports whether it wrote them.
func (e *Env) RestoreStarts(run RunInfo, step int, chunks []helix.Chunk) dbos.Step[bool] {
	return func(ctx context.Context) (bool, error) {
		written, err := e.startsWritten(ctx, run, step)
		if err != nil || written {
			return false, err
		}
		_, err = e.Store.Append(ctx, run.StreamID, fencedWrites(run, chunks))
		return err == nil, fenced(run, err)
	}
}

// startsWritten reports whether the stream holds a chunk of the run's step
// above the session's checkpoint (the previous step's): ReadStep's stale
// check. Nothing of a step that holds its start chunks is written before
// them, so any chunk of it means they are there.
func (e *Env) startsWritten(ctx context.Context, run RunInfo, step int) (bool, error) {
	st, err := e.Store.ReadStep(ctx, store.ReadStepParams{SessionID: run.SessionID, RunID: run.RunID,
		AfterStep: step - 1, MinSequence: run.StartSequence})
	if err != nil {
		return false, err
	}
	return st.Stale, nil
}
