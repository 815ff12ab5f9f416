package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/server/internal/redact"
	"github.com/helix-agents/helix-dbos/store"
)

// Resume headers of GET /sse, strongest first (then ?fromSequence=).
const (
	HeaderResumeFromSequence = "X-Resume-From-Sequence"
	HeaderLastEventID        = "Last-Event-ID"
)

// resumePosition returns the sequence the client has already seen:
// X-Resume-From-Sequence, else Last-Event-ID, else ?fromSequence=. ok is
// false when the client gave none.
func resumePosition(r *http.Request) (from int64, ok bool, apiErr *apiError) {
	sources := []struct{ name, value string }{
		{HeaderResumeFromSequence, r.Header.Get(HeaderResumeFromSequence)},
		{HeaderLastEventID, r.Header.Get(HeaderLastEventID)},
		{"fromSequence", r.URL.Query().Get("fromSequence")},
	}
	for _, src := range sources {
		if src.value == "" {
			continue
		}
		n, err := strconv.ParseInt(src.value, 10, 64)
		if err != nil || n < 0 {
			return 0, false, newError(http.StatusBadRequest, CodeInvalidResume,
				"%s must be a non-negative integer (the id of the last event received), got %q", src.name, src.value)
		}
		return n, true, nil
	}
	return 0, false, nil
}

// handleSSE streams a session's chunks as server-sent events (see the
// package documentation, "Streaming").
func (s *Server) handleSSE(w http.ResponseWriter, r *http.Request) *apiError {
	id := r.URL.Query().Get("sessionId")
	if err := requireSessionID(id); err != nil {
		return err
	}
	from, explicit, apiErr := resumePosition(r)
	if apiErr != nil {
		return apiErr
	}
	if _, apiErr := s.session(r.Context(), id); apiErr != nil {
		return apiErr
	}
	if !explicit {
		// No position: the current run from its first chunk, as
		// Handle.Stream reads it.
		run, err := s.eng.CurrentRun(r.Context(), id)
		switch {
		case err == nil:
			from = run.StartSequence
		case !errors.Is(err, helix.ErrNotFound):
			return internalError(err)
		}
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// The reader subscribes before the stream's state is read: nothing
	// written after the check is missed.
	rd, err := s.eng.Stream(ctx, id, from)
	if err != nil {
		return internalError(err)
	}
	defer func() { _ = rd.Close() }()
	info, err := rd.Info(r.Context())
	if err != nil {
		return internalError(err)
	}
	latest := info.LatestSequence
	if from > latest {
		return newError(http.StatusBadRequest, CodeInvalidResume,
			"resume position %d is past the stream's last event (%d): resume from the id of an event you received", from, latest)
	}
	if explicit && from == latest && (info.Status == helix.StreamEnded || info.Status == helix.StreamFailed) {
		// The client has every event of a finished stream: EventSource
		// reconnects after the end (or fail) event with its last id, and
		// 204 is what makes it stop instead of replaying the end forever.
		w.WriteHeader(http.StatusNoContent)
		return nil
	}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return newError(http.StatusServiceUnavailable, CodeShuttingDown, "the server is shutting down: retry on another instance")
	}
	s.streams.Add(1)
	s.mu.Unlock()
	defer s.streams.Done()

	log := s.log.With().Str("requestId", requestIDFrom(r.Context())).Str("sessionId", id).Str("streamId", rd.StreamID()).Logger()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	out := &eventWriter{w: w, rc: http.NewResponseController(w), timeout: s.cfg.StreamWriteTimeout}
	out.deadline()
	w.WriteHeader(http.StatusOK)
	out.flush()

	s.metrics.sseConnections.Inc()
	defer s.metrics.sseConnections.Dec()
	log.Debug().Str("event", "sse.opened").Int64("fromSequence", from).Msg("SSE stream opened")

	p := newPump(ctx)
	p.start(rd)
	defer p.stop()

	opened := time.Now()
	last := from
	lastErrorCode := "" // of the last error chunk sent: an internal failure's fail event is redacted
	heartbeat := time.NewTicker(s.cfg.HeartbeatInterval)
	defer heartbeat.Stop()
	for out.err == nil {
		select {
		case <-ctx.Done():
			log.Debug().Str("event", "sse.client_gone").Int64("lastSequence", last).Msg("SSE client disconnected")
			return nil
		case <-s.shutdown:
			out.comment("server shutting down: reconnect with Last-Event-ID")
			log.Debug().Str("event", "sse.shutdown").Int64("lastSequence", last).Msg("SSE stream ended by shutdown")
			return nil
		case <-heartbeat.C:
			out.comment("ping")
		case n := <-p.ch:
			if n.err == nil {
				if end, ok := n.c.Chunk.(*helix.StreamEnd); ok {
					out.event(n.c.Sequence, true, endEvent(end.FinalOutput))
					return nil
				}
				if e, ok := n.c.Chunk.(*helix.ErrorChunk); ok {
					lastErrorCode = e.Code
					if lastErrorCode == "" && e.ErrorDetail != nil {
						lastErrorCode = e.ErrorDetail.Code
					}
				}
				out.event(n.c.Sequence, true, chunkEvent(n.c))
				last = n.c.Sequence
				s.metrics.observeChunk(n.c, opened)
				continue
			}
			var (
				failed    *helix.StreamFailedError
				truncated *helix.StreamTruncatedError
			)
			switch {
			case errors.Is(n.err, io.EOF):
				// Ended without a stream_end after the position (the
				// client resumed after the end): end again.
				final := json.RawMessage(nil)
				if info, err := rd.Info(ctx); err == nil {
					final = info.FinalOutput
				}
				out.event(0, false, endEvent(final))
				return nil
			case errors.As(n.err, &failed):
				msg := failed.Message
				if lastErrorCode == "" { // resumed after the error chunk: ask the run
					if run, err := s.eng.CurrentRun(ctx, id); err == nil && run.Status == helix.RunFailed {
						lastErrorCode = run.ErrorCode
					}
				}
				if redact.Internal(lastErrorCode) {
					msg = redact.RunFailure
				}
				out.event(0, false, mustJSON(map[string]string{"type": "fail", "error": msg}))
				return nil
			case errors.As(n.err, &truncated):
				// G4: chunks after the client's cursor were removed (crash
				// recovery, retry). Say so, then go on from the surviving
				// chunks (the reader does): the stream's stream_resync
				// chunk follows.
				out.event(0, false, mustJSON(map[string]any{"type": "truncated",
					"truncatedAtStep": truncated.TruncatedAtStep, "atSequence": truncated.AtSequence}))
				log.Info().Str("event", "sse.truncated").Int64("lastSequence", last).Int64("atSequence", truncated.AtSequence).
					Msg("stream truncated under an SSE client: continuing from the surviving chunks")
				p.wait()
				p.start(rd)
			case ctx.Err() != nil:
				return nil
			default:
				log.Error().Str("event", "sse.error").Err(n.err).Int64("lastSequence", last).
					Msg("SSE stream: reading the stream failed; the client reconnects")
				out.comment("stream interrupted by a server error: reconnect with Last-Event-ID")
				return nil
			}
		}
	}
	log.Debug().Str("event", "sse.write_failed").Err(out.err).Int64("lastSequence", last).
		Msg("SSE client unreachable or not reading: response ended")
	return nil
}

// nextChunk is one result of Reader.Next.
type nextChunk struct {
	c   store.StoredChunk
	err error
}

// pump runs a reader's blocking Next in a goroutine so that the handler can
// select on chunks, heartbeats, shutdown and the client's departure.
type pump struct {
	ctx    context.Context
	cancel context.CancelFunc
	ch     chan nextChunk
	rd     store.Reader
	wg     sync.WaitGroup
}

func newPump(ctx context.Context) *pump {
	ctx, cancel := context.WithCancel(ctx)
	return &pump{ctx: ctx, cancel: cancel, ch: make(chan nextChunk)}
}

// start reads rd until an error, which it delivers last.
func (p *pump) start(rd store.Reader) {
	p.rd = rd
	p.wg.Go(func() {
		for {
			c, err := rd.Next(p.ctx)
			select {
			case p.ch <- nextChunk{c, err}:
			case <-p.ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	})
}

// wait waits for the goroutine, after it delivered its error; the reader
// stays open, to go on reading.
func (p *pump) wait() {
	p.wg.Wait()
}

// stop ends the goroutine and closes the reader (a waiting Next returns).
func (p *pump) stop() {
	p.cancel()
	_ = p.rd.Close()
	p.wg.Wait()
}

// eventWriter writes SSE frames and flushes each, within a write deadline
// per frame; the first write error sticks (the client is gone, or stopped
// reading).
type eventWriter struct {
	w       io.Writer
	rc      *http.ResponseController
	timeout time.Duration // of one frame's write and flush
	err     error
}

// deadline arms the write deadline of the next frame. The deadline is the
// connection's: net/http clears it when the response ends. A writer that
// cannot set one (ErrNotSupported) writes without.
func (e *eventWriter) deadline() {
	if err := e.rc.SetWriteDeadline(time.Now().Add(e.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		e.err = err
	}
}

func (e *eventWriter) event(id int64, withID bool, data []byte) {
	if e.deadline(); e.err != nil {
		return
	}
	var b bytes.Buffer
	if withID {
		b.WriteString("id: ")
		b.WriteString(strconv.FormatInt(id, 10))
		b.WriteByte('\n')
	}
	b.WriteString("data: ")
	b.Write(data)
	b.WriteString("\n\n")
	if _, e.err = e.w.Write(b.Bytes()); e.err == nil {
		e.flush()
	}
}

func (e *eventWriter) comment(text string) {
	if e.deadline(); e.err != nil {
		return
	}
	if _, e.err = fmt.Fprintf(e.w, ": %s\n\n", text); e.err == nil {
		e.flush()
	}
}

func (e *eventWriter) flush() {
	if err := e.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		e.err = err
	}
}

// chunkEvent is {"type":"chunk","chunk":<stored JSON>,"sequence":n}. The
// stored bytes are served as they are (the store keeps them byte for byte),
// except for an internal failure's text (package redact, shared with the
// chat routes); a chunk whose JSON spans lines is compacted so it fits one
// data: line.
func chunkEvent(c store.StoredChunk) []byte {
	raw := []byte(c.Raw)
	if redacted := redact.Chunk(c.Chunk); redacted != nil {
		raw = mustJSON(redacted)
	}
	if len(raw) == 0 {
		raw = mustJSON(c.Chunk)
	} else if bytes.ContainsAny(raw, "\r\n") {
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err == nil {
			raw = b.Bytes()
		} else {
			raw = mustJSON(c.Chunk)
		}
	}
	var b bytes.Buffer
	b.Grow(len(raw) + 48)
	b.WriteString(`{"type":"chunk","chunk":`)
	b.Write(raw)
	b.WriteString(`,"sequence":`)
	b.WriteString(strconv.FormatInt(c.Sequence, 10))
	b.WriteByte('}')
	return b.Bytes()
}

// endEvent is {"type":"end"} with the stream's final output, when it has
// one.
func endEvent(final json.RawMessage) []byte {
	if len(final) == 0 || string(final) == "null" {
		return []byte(`{"type":"end"}`)
	}
	return mustJSON(struct {
		Type        string          `json:"type"`
		FinalOutput json.RawMessage `json:"finalOutput"`
	}{"end", final})
}

// mustJSON marshals values that always marshal (maps of strings and
// numbers, chunks, valid raw JSON).
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte(`{"type":"fail","error":"the server could not encode an event"}`)
	}
	return b
}
