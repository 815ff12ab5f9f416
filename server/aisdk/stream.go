package aisdk

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/store"
)

// streamSpec is one response: a run of a chat, the last stream sequence
// the client already has, and the ID of the assistant message the response
// writes into.
type streamSpec struct {
	st        *store.SessionState
	run       *store.Run
	from      int64
	messageID string
}

// primePageSize is the page size of the catch-up read that rebuilds the
// translator's state from the chunks the client already has.
const primePageSize = 500

// streamRun writes a run's chunks after spec.from as a UI message stream,
// live, until the run ends (its closing chunk, or a final status with
// nothing left to read) or suspends on a tool call or approval with
// nothing left to read: the response then ends with finish
// ("tool-calls") and the run keeps waiting in Postgres for the answers.
// It returns an error only before the response started.
func (h *Handler) streamRun(w http.ResponseWriter, r *http.Request, spec streamSpec) *apiError {
	ctx := r.Context()
	tr := NewTranslator(spec.st.SessionID, &TranslatorOptions{ErrorText: h.opts.ErrorText,
		StructuredOutput: h.structured(spec.st.AgentType)})
	reader, err := h.eng.Stream(ctx, spec.st.SessionID, spec.from)
	if err != nil {
		return internalError(err)
	}
	if err := h.prime(ctx, tr, reader, spec); err != nil {
		_ = reader.Close()
		return internalError(err)
	}
	readCtx, cancel := context.WithCancel(ctx)
	results := make(chan readResult)
	var wg sync.WaitGroup
	wg.Go(func() { readLoop(readCtx, reader, results) })
	defer func() {
		cancel()
		_ = reader.Close()
		wg.Wait()
	}()

	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("X-Accel-Buffering", "no")
	hdr.Set(HeaderUIMessageStream, UIMessageStreamVersion)
	sw := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: h.opts.WriteTimeout}
	if err := sw.deadline(); err != nil {
		return internalError(err)
	}
	w.WriteHeader(http.StatusOK)
	log := h.log.With().Str("sessionId", spec.st.SessionID).Str("runId", spec.run.RunID).Logger()
	last := spec.from
	writeFailed := func(err error) *apiError {
		log.Debug().Str("event", "chat.write_failed").Err(err).Int64("sequence", last).
			Msg("chat stream: the client is unreachable or not reading: response ended")
		return nil
	}

	meta := map[string]any{"sessionId": spec.st.SessionID, "runId": spec.run.RunID}
	if err := sw.event(Chunk{Type: TypeStart, MessageID: spec.messageID, MessageMetadata: map[string]any{"helix": meta}}, 0); err != nil {
		return writeFailed(err)
	}
	// The run's status is checked only while no chunk arrives (a chunk
	// says the run is going on), soon after the last one, then less and
	// less often.
	poll := newIdlePoll(h.opts.PollInterval, h.opts.MaxPollInterval)
	defer poll.stop()
	heartbeat := time.NewTicker(h.opts.HeartbeatInterval)
	defer heartbeat.Stop()
	var end ending
loop:
	for {
		select {
		case <-ctx.Done():
			return nil // the client went away (or package server shut down); the run goes on
		case <-h.shutdown:
			// No finish: the client reconnects with GET …/stream.
			_ = sw.comment("server shutting down: reconnect to continue")
			log.Debug().Str("event", "chat.shutdown").Int64("sequence", last).Msg("chat stream ended by shutdown")
			return nil
		case <-heartbeat.C:
			if err := sw.keepAlive(); err != nil {
				return writeFailed(err)
			}
		case <-poll.c():
			settled, e, err := h.settled(ctx, reader, spec, last)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if n, ok := h.pollWarn.allow(); ok {
					log.Warn().Err(err).Int("suppressed", n).Msg("chat stream: status check failed; retrying (repeats are logged at most every 30 s)")
				}
				poll.backOff()
				continue
			}
			if settled {
				end = e
				break loop
			}
			poll.backOff()
		case res := <-results:
			if res.err != nil {
				end = h.readEnd(ctx, sw, res.err, log)
				if ctx.Err() != nil {
					return nil
				}
				break loop
			}
			poll.activity()
			out := tr.Translate(res.chunk)
			for i, c := range out {
				var seq int64
				if i == len(out)-1 {
					seq = res.chunk.Sequence // Last-Event-ID resumes after the whole chunk
				}
				if err := sw.event(c, seq); err != nil {
					return writeFailed(err)
				}
			}
			last = res.chunk.Sequence
			if e, ok := ends(res.chunk, spec.run.RunID); ok {
				end = e
				break loop
			}
		}
	}
	for _, c := range tr.Close() {
		if err := sw.event(c, 0); err != nil {
			return writeFailed(err)
		}
	}
	reason := end.reason
	if reason == FinishStop && tr.FinishReason() != "" {
		reason = tr.FinishReason()
	}
	meta["sequence"] = last
	if end.status != "" {
		meta["status"] = end.status
	}
	if err := sw.event(Chunk{Type: TypeFinish, FinishReason: reason, MessageMetadata: map[string]any{"helix": meta}}, 0); err != nil {
		return writeFailed(err)
	}
	_ = sw.done()
	log.Debug().Str("finishReason", reason).Int64("sequence", last).Msg("chat stream ended")
	return nil
}

// structured reports whether the chat's agent has an output schema (its
// output is then a data part; otherwise it is the final text).
func (h *Handler) structured(agentType string) bool {
	a, ok := h.agents[agentType]
	return ok && len(a.OutputSchema) > 0
}

// prime feeds the translator the run's chunks the client already has
// (after the run's start, up to spec.from), so that the response continues
// their parts with consistent IDs and tool states.
func (h *Handler) prime(ctx context.Context, tr *Translator, rd *engine.StreamReader, spec streamSpec) error {
	if spec.from <= spec.run.StartSequence {
		return nil
	}
	after := spec.run.StartSequence
	for after < spec.from {
		page, err := rd.Chunks(ctx, after, primePageSize)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			break
		}
		for _, c := range page {
			if c.Sequence > spec.from {
				after = spec.from
				break
			}
			tr.Translate(c)
			after = c.Sequence
		}
	}
	tr.Reopen()
	return nil
}

// ending is how a response ends: the finish reason and the run status
// reported in the message metadata.
type ending struct {
	reason string
	status helix.RunStatus
}

// ends reports whether c is the last chunk of the run (the rule of
// engine.Handle.Stream) and how the response ends.
func ends(c store.StoredChunk, runID string) (ending, bool) {
	switch ch := c.Chunk.(type) {
	case *helix.StreamEnd:
		return ending{reason: FinishStop, status: helix.RunCompleted}, true
	case *helix.RunInterruptedChunk:
		if ch.RunID == runID {
			return ending{reason: FinishOther, status: helix.RunInterrupted}, true
		}
	case *helix.ErrorChunk:
		if c.RunID == runID {
			return ending{reason: FinishError, status: helix.RunFailed}, true
		}
	}
	return ending{}, false
}

// settled reports whether the response should end now: the run suspended
// (waiting for a tool result or approval) or ended, and the client has
// every chunk written so far. The status is read before the chunks, and a
// run writes its chunks before (or with) the status change, so nothing the
// run wrote before settling is missed.
func (h *Handler) settled(ctx context.Context, rd *engine.StreamReader, spec streamSpec, last int64) (bool, ending, error) {
	run, err := h.eng.RunInfo(ctx, spec.run.RunID)
	if err != nil {
		return false, ending{}, err
	}
	if !run.Status.Final() && !run.Status.Suspended() {
		return false, ending{}, nil
	}
	more, err := rd.Chunks(ctx, last, 1)
	if err != nil || len(more) > 0 {
		return false, ending{}, err
	}
	e := ending{status: run.Status}
	switch run.Status {
	case helix.RunCompleted:
		e.reason = FinishStop
	case helix.RunFailed:
		e.reason = FinishError
	case helix.RunInterrupted:
		e.reason = FinishOther
	default:
		e.reason = FinishToolCalls
	}
	return true, e, nil
}

// readEnd ends a response whose stream reader stopped with err.
func (h *Handler) readEnd(ctx context.Context, sw *sseWriter, err error, log zerolog.Logger) ending {
	var failed *helix.StreamFailedError
	switch {
	case errors.Is(err, io.EOF):
		return ending{reason: FinishStop, status: helix.RunCompleted}
	case errors.As(err, &failed):
		return ending{reason: FinishError, status: helix.RunFailed}
	case ctx.Err() != nil:
		return ending{}
	case errors.Is(err, helix.ErrStreamTruncated):
		_ = sw.event(Chunk{Type: TypeError, ErrorText: "The conversation was rewound (crash recovery or rollback): reload it."}, 0)
		return ending{reason: FinishError}
	}
	log.Error().Err(err).Msg("chat stream: reading the stream failed")
	_ = sw.event(Chunk{Type: TypeError, ErrorText: "Reading the conversation failed: reconnect to continue."}, 0)
	return ending{reason: FinishError}
}

// readResult is one step of the reader: a chunk or the error that ends it.
type readResult struct {
	chunk store.StoredChunk
	err   error
}

// readLoop forwards the reader's chunks until an error (io.EOF after
// stream_end included) or ctx ends.
func readLoop(ctx context.Context, r store.Reader, out chan<- readResult) {
	for {
		c, err := r.Next(ctx)
		select {
		case out <- readResult{chunk: c, err: err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// idlePoll schedules the status checks of a stream: the first one interval
// after the last chunk, then each pause doubled up to maxInterval, while no
// chunk arrives. A check of a busy stream is wasted (its chunks say the run
// is going on), and an idle stream (a long model call, a slow tool) is
// checked at most every maxInterval: with many open chats the database
// sees a few queries per second, not ten per chat.
type idlePoll struct {
	interval, maxInterval time.Duration
	next                  time.Duration // the pause of the next check
	timer                 *time.Timer
}

func newIdlePoll(interval, maxInterval time.Duration) *idlePoll {
	return &idlePoll{interval: interval, maxInterval: maxInterval, next: interval, timer: time.NewTimer(interval)}
}

// c fires when a check is due.
func (p *idlePoll) c() <-chan time.Time { return p.timer.C }

// activity starts over after a chunk: the next check is interval away.
func (p *idlePoll) activity() {
	p.next = p.interval
	p.timer.Reset(p.next)
}

// backOff schedules the next check after one that found the run going on
// (or failed), with a doubled pause.
func (p *idlePoll) backOff() {
	p.next = min(p.next*2, p.maxInterval)
	p.timer.Reset(p.next)
}

func (p *idlePoll) stop() { p.timer.Stop() }

// pollWarnEvery is the least time between two warnings about failed status
// checks: during a database outage every open stream fails its checks.
const pollWarnEvery = 30 * time.Second

// rateLimiter lets an event through at most once per every, and counts the
// ones it held back meanwhile. Safe for concurrent use.
type rateLimiter struct {
	every time.Duration
	now   func() time.Time

	mu         sync.Mutex
	last       time.Time // of the last event let through; zero before
	suppressed int
}

func newRateLimiter(every time.Duration, now func() time.Time) *rateLimiter {
	return &rateLimiter{every: every, now: now}
}

// allow reports whether the event may go through now and, if so, how many
// were held back since the last one that did.
func (l *rateLimiter) allow() (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.suppressed++
		return 0, false
	}
	suppressed, l.last, l.suppressed = l.suppressed, now, 0
	return suppressed, true
}
