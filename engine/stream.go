package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// Stream opens a session's stream for reading after sequence from (the last
// sequence the caller has seen, as an SSE Last-Event-ID; 0 reads from the
// beginning). The reader follows the stream live: Next waits for the next
// chunk. A sub-agent session's chunks are in its root's stream, which Stream
// resolves. To read the current run from its first chunk, pass
// CurrentRun's StartSequence (Handle.Stream does that for one run).
//
// Stream returns an error wrapping helix.ErrNotFound when the session does
// not exist. Close the reader when done.
func (e *Engine) Stream(ctx context.Context, sessionID string, from int64) (*StreamReader, error) {
	return e.control().stream(ctx, sessionID, from)
}

// Stream opens a session's stream for reading after sequence from; see
// Engine.Stream.
func (c *Client) Stream(ctx context.Context, sessionID string, from int64) (*StreamReader, error) {
	return c.c.stream(ctx, sessionID, from)
}

func (c control) stream(ctx context.Context, sessionID string, from int64) (*StreamReader, error) {
	if from < 0 {
		return nil, fmt.Errorf("engine: stream of session %s: from must be >= 0 (the last sequence seen, 0 for all), got %d", sessionID, from)
	}
	st, err := c.store.LoadState(ctx, sessionID)
	if err != nil {
		return nil, fmt.Errorf("engine: stream of session %s: %w", sessionID, err)
	}
	r := &StreamReader{store: c.store, sessionID: sessionID, streamID: st.StreamID, last: from}
	if r.rd, err = c.store.NewReader(ctx, st.StreamID, &store.ReaderOptions{FromSequence: from}); err != nil {
		return nil, fmt.Errorf("engine: stream of session %s: %w", sessionID, err)
	}
	return r, nil
}

// StreamReader reads a session's stream in sequence order, live: from
// Engine.Stream or Client.Stream. Next is not safe for concurrent use; Close
// may be called from any goroutine (a waiting Next then returns).
type StreamReader struct {
	store     *postgres.Store
	sessionID string
	streamID  string

	mu     sync.Mutex // guards rd, closed and reopen against Close
	rd     store.Reader
	closed bool
	reopen bool  // the last Next returned a truncation: the next one reopens
	last   int64 // the last sequence returned (or the start position)
}

// Next returns the next chunk, waiting for one. It returns:
//
//   - io.EOF after the stream_end chunk (or when the stream ended without
//     one: the caller resumed after the end);
//   - *helix.StreamFailedError after the last chunk of a failed stream;
//   - *helix.StreamTruncatedError (helix.ErrStreamTruncated) when chunks
//     after the reader's position were removed (crash recovery, a retry).
//     The reader stays usable: the next call goes on from the surviving
//     chunks, the first being the stream's stream_resync chunk;
//   - the context's error, or an error reading the database.
func (r *StreamReader) Next(ctx context.Context) (store.StoredChunk, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return store.StoredChunk{}, fmt.Errorf("engine: stream of session %s: the reader is closed", r.sessionID)
	}
	if r.reopen {
		_ = r.rd.Close()
		rd, err := r.store.NewReader(ctx, r.streamID, &store.ReaderOptions{FromSequence: r.last})
		if err != nil {
			r.mu.Unlock()
			return store.StoredChunk{}, fmt.Errorf("engine: stream of session %s: reopen after a truncation: %w", r.sessionID, err)
		}
		r.rd, r.reopen = rd, false
	}
	rd := r.rd
	r.mu.Unlock()

	c, err := rd.Next(ctx)
	if err == nil {
		r.mu.Lock()
		r.last = c.Sequence
		r.mu.Unlock()
		return c, nil
	}
	if errors.Is(err, helix.ErrStreamTruncated) {
		r.mu.Lock()
		r.reopen = !r.closed
		r.mu.Unlock()
	}
	return store.StoredChunk{}, err
}

// Sequence returns the sequence of the last chunk Next returned (the
// position the reader started after, before the first).
func (r *StreamReader) Sequence() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// SessionID returns the session the reader was opened for.
func (r *StreamReader) SessionID() string { return r.sessionID }

// StreamID returns the stream the reader reads: the session's own, or its
// root's for a sub-agent.
func (r *StreamReader) StreamID() string { return r.streamID }

// Info returns the stream's current state: its status, latest sequence and
// final output. It reads the database and does not move the reader.
func (r *StreamReader) Info(ctx context.Context) (*store.StreamInfo, error) {
	info, err := r.store.GetStreamInfo(ctx, r.streamID)
	if err != nil {
		return nil, fmt.Errorf("engine: stream of session %s: %w", r.sessionID, err)
	}
	return info, nil
}

// Chunks returns at most limit stored chunks after sequence after, without
// waiting and without moving the reader: a catch-up read of what a client
// already has, or a check for chunks written after a position.
func (r *StreamReader) Chunks(ctx context.Context, after int64, limit int) ([]store.StoredChunk, error) {
	cs, err := r.store.ReadChunks(ctx, r.streamID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("engine: stream of session %s: %w", r.sessionID, err)
	}
	return cs, nil
}

// Close releases the reader; a Next waiting in another goroutine returns.
// Idempotent.
func (r *StreamReader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	return r.rd.Close()
}

var _ store.Reader = (*StreamReader)(nil)

// StreamInfo returns the state of a session's stream (its root's for a
// sub-agent): its status, latest sequence and final output. It returns an
// error wrapping helix.ErrNotFound when the session does not exist.
func (e *Engine) StreamInfo(ctx context.Context, sessionID string) (*store.StreamInfo, error) {
	return e.control().streamInfo(ctx, sessionID)
}

// StreamInfo returns the state of a session's stream; see
// Engine.StreamInfo.
func (c *Client) StreamInfo(ctx context.Context, sessionID string) (*store.StreamInfo, error) {
	return c.c.streamInfo(ctx, sessionID)
}

func (c control) streamInfo(ctx context.Context, sessionID string) (*store.StreamInfo, error) {
	st, err := c.store.LoadState(ctx, sessionID)
	if err != nil {
		return nil, fmt.Errorf("engine: stream of session %s: %w", sessionID, err)
	}
	info, err := c.store.GetStreamInfo(ctx, st.StreamID)
	if err != nil {
		return nil, fmt.Errorf("engine: stream of session %s: %w", sessionID, err)
	}
	return info, nil
}

// StreamChunks returns at most limit chunks of a session's stream (its
// root's for a sub-agent) after sequence after, without waiting: what is
// stored now. Holding a StreamReader, use its Chunks.
func (e *Engine) StreamChunks(ctx context.Context, sessionID string, after int64, limit int) ([]store.StoredChunk, error) {
	return e.control().streamChunks(ctx, sessionID, after, limit)
}

// StreamChunks returns at most limit chunks of a session's stream after
// sequence after, without waiting; see Engine.StreamChunks.
func (c *Client) StreamChunks(ctx context.Context, sessionID string, after int64, limit int) ([]store.StoredChunk, error) {
	return c.c.streamChunks(ctx, sessionID, after, limit)
}

func (c control) streamChunks(ctx context.Context, sessionID string, after int64, limit int) ([]store.StoredChunk, error) {
	st, err := c.store.LoadState(ctx, sessionID)
	if err != nil {
		return nil, fmt.Errorf("engine: stream of session %s: %w", sessionID, err)
	}
	cs, err := c.store.ReadChunks(ctx, st.StreamID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("engine: stream of session %s: %w", sessionID, err)
	}
	return cs, nil
}
