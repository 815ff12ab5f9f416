package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// reader implements store.Reader.
type reader struct {
	st       *Store
	streamID string
	sub      *subscription

	quit      chan struct{} // closed by Close
	closeOnce sync.Once

	mu      sync.Mutex // serializes Next
	buf     []store.StoredChunk
	fetched int64        // last sequence fetched from the table
	yielded atomic.Int64 // last sequence returned by Next
	epoch   int          // truncation epoch known to the reader; -1 before the first fetch
	ended   bool         // stream_end returned
}

// NewReader implements store.StreamStore.
func (s *Store) NewReader(ctx context.Context, streamID string, opts *store.ReaderOptions) (store.Reader, error) {
	var from int64
	if opts != nil {
		from = opts.FromSequence
	}
	if from < 0 {
		return nil, fmt.Errorf("store: read stream %s: from sequence must be >= 0, got %d", streamID, from)
	}
	n, err := s.listener()
	if err != nil {
		return nil, err
	}
	// Subscribe before the first query so no write between them is missed.
	r := &reader{st: s, streamID: streamID, sub: n.subscribe(streamID), fetched: from,
		quit: make(chan struct{})}
	r.yielded.Store(from)
	// Record the truncation epoch at attach time: cleanups before this point
	// are not the reader's concern (it starts from the surviving chunks),
	// cleanups after it are checked on every fetch.
	err = s.shared.pool.QueryRow(ctx, `SELECT truncation_epoch FROM helix.streams WHERE stream_id = $1`, streamID).Scan(&r.epoch)
	if isNoRows(err) {
		err = notFound("stream", streamID)
	}
	if err != nil {
		r.sub.close()
		return nil, wrap(err, "read stream %s", streamID)
	}
	return r, nil
}

// refillState fetches the next page into r.buf (possibly nothing) after
// checking that no cleanup removed chunks the reader has not fetched.
func (r *reader) refillState(ctx context.Context) (streamState, error) {
	page, state, err := r.st.fetch(ctx, r.streamID, r.fetched, readPageSize)
	if err != nil {
		return state, err
	}
	if state.epoch != r.epoch {
		if err := r.checkTruncation(ctx); err != nil {
			return state, err
		}
		r.epoch = state.epoch
	}
	r.buf = append(r.buf, page...)
	if len(page) > 0 {
		r.fetched = page[len(page)-1].Sequence
	}
	return state, nil
}

// refillRetrying is refillState that rides out transient database errors
// (a killed connection, a server restart) for up to the retry timeout.
func (r *reader) refillRetrying(ctx context.Context) (streamState, error) {
	var state streamState
	err := retryTransient(ctx, r.st.shared.opts.retryTimeout, r.quit, func() error {
		var err error
		state, err = r.refillState(ctx)
		return err
	}, func(_ int, err error) {
		r.st.shared.opts.logger.Warn().Err(err).Str("stream", r.streamID).Msg("stream read failed, retrying")
	})
	return state, err
}

// checkTruncation fails the reader when a cleanup since its last fetch
// removed chunks it had not fetched yet.
func (r *reader) checkTruncation(ctx context.Context) error {
	var maxSeq, atSequence int64
	var atStep int
	err := r.st.shared.pool.QueryRow(ctx, `SELECT COALESCE(max(max_seq), 0), COALESCE(max(at_step), 0),
			COALESCE(max(at_sequence), 0)
		FROM helix.stream_truncations WHERE stream_id = $1 AND epoch > $2`, r.streamID, r.epoch).
		Scan(&maxSeq, &atStep, &atSequence)
	if err != nil {
		return err
	}
	if maxSeq > r.fetched {
		return &helix.StreamTruncatedError{StreamID: r.streamID, TruncatedAtStep: atStep, AtSequence: atSequence}
	}
	return nil
}

// Next implements store.Reader.
func (r *reader) Next(ctx context.Context) (store.StoredChunk, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-r.quit:
			return store.StoredChunk{}, errReaderClosed
		default:
		}
		if len(r.buf) > 0 {
			c := r.buf[0]
			r.buf = r.buf[1:]
			r.yielded.Store(c.Sequence)
			if c.Chunk.ChunkType() == helix.ChunkStreamEnd {
				// A stream ends here even if a later turn reactivated it.
				r.ended, r.buf = true, nil
			}
			return c, nil
		}
		if r.ended {
			return store.StoredChunk{}, io.EOF
		}
		if err := ctx.Err(); err != nil {
			return store.StoredChunk{}, err
		}
		state, err := r.refillRetrying(ctx)
		if err != nil {
			return store.StoredChunk{}, wrap(err, "read stream %s", r.streamID)
		}
		if len(r.buf) > 0 {
			continue
		}
		switch state.status {
		case helix.StreamFailed:
			return store.StoredChunk{}, &helix.StreamFailedError{StreamID: r.streamID, Message: state.errMsg}
		case helix.StreamEnded:
			return store.StoredChunk{}, io.EOF
		}
		if timer == nil {
			timer = time.NewTimer(r.st.shared.opts.pollInterval)
		} else {
			timer.Reset(r.st.shared.opts.pollInterval)
		}
		select {
		case <-r.sub.c:
			timer.Stop()
		case <-timer.C:
		case <-r.quit:
			return store.StoredChunk{}, errReaderClosed
		case <-ctx.Done():
			return store.StoredChunk{}, ctx.Err()
		}
	}
}

// errReaderClosed is returned by Next after Close.
var errReaderClosed = errors.New("store: stream reader is closed")

// Sequence implements store.Reader.
func (r *reader) Sequence() int64 { return r.yielded.Load() }

// Close implements store.Reader. It may be called while Next waits, which
// then returns.
func (r *reader) Close() error {
	r.closeOnce.Do(func() {
		close(r.quit)
		r.sub.close()
	})
	return nil
}

var _ io.Closer = (*reader)(nil)
