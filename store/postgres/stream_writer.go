package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// batch is a group of chunks (of any streams) written by one statement.
type batch struct {
	items    []batchItem
	openedAt time.Time
	urgent   bool          // flush without waiting for the interval
	done     chan struct{} // closed once the outcome is delivered
}

type batchItem struct {
	chunk encodedChunk
	w     *writer
}

// batcher coalesces the chunks of every writer of a Store into batched
// inserts. One goroutine flushes batches in FIFO order, which keeps each
// stream's chunks in write order.
type batcher struct {
	st *Store

	mu     sync.Mutex
	cur    *batch
	closed bool

	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	lastPrune time.Time
}

func newBatcher(st *Store) *batcher {
	b := &batcher{
		st:        st,
		kick:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		lastPrune: time.Now(),
	}
	go b.run()
	return b
}

// batcher returns the store's batcher, starting it on first use.
func (s *Store) batcher() (*batcher, error) {
	sh := s.shared
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		return nil, errClosed
	}
	if sh.batcher == nil {
		sh.batcher = newBatcher(&Store{q: PgxQuerier(sh.pool), shared: sh})
	}
	return sh.batcher, nil
}

// enqueue adds a chunk to the open batch. An urgent chunk (not a delta)
// makes the batch flush now. When the batch is full the caller waits for it
// (backpressure), so memory stays bounded when the database is slow.
func (b *batcher) enqueue(ctx context.Context, w *writer, c encodedChunk, urgent bool) (*batch, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, errClosed
	}
	if b.cur == nil {
		b.cur = &batch{openedAt: time.Now(), done: make(chan struct{})}
		wake(b.kick)
	}
	cur := b.cur
	cur.items = append(cur.items, batchItem{chunk: c, w: w})
	w.mu.Lock()
	w.last = cur
	w.mu.Unlock()
	full := len(cur.items) >= b.st.shared.opts.maxBatch
	if urgent || full {
		cur.urgent = true
		wake(b.kick)
	}
	b.mu.Unlock()
	if full && !urgent {
		select {
		case <-cur.done:
		case <-ctx.Done():
			return cur, ctx.Err()
		}
	}
	return cur, nil
}

func (b *batcher) run() {
	defer close(b.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	interval := b.st.shared.opts.flushInterval
	for {
		b.mu.Lock()
		cur, closing := b.cur, b.closed
		var wait time.Duration
		if cur != nil && !cur.urgent && !closing {
			wait = time.Until(cur.openedAt.Add(interval))
		}
		b.mu.Unlock()
		if cur == nil {
			if closing {
				return
			}
			select {
			case <-b.kick:
			case <-b.stop:
			}
			continue
		}
		if wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-b.kick:
				timer.Stop()
				continue
			case <-b.stop:
				timer.Stop()
				continue
			}
		}
		b.mu.Lock()
		taken := b.cur
		b.cur = nil
		b.mu.Unlock()
		b.flush(taken)
	}
}

// flush writes a batch, retrying transient errors for up to the write retry
// timeout. The batch's idempotency token makes a retry after a lost commit
// acknowledgement safe: the token's primary key rejects the second insert,
// and the recorded outcome is used instead.
func (b *batcher) flush(bt *batch) {
	opts := b.st.shared.opts
	ctx, cancel := context.WithTimeout(context.Background(), opts.retryTimeout+5*time.Second)
	defer cancel()
	if bt.items = guardItems(ctx, bt.items); len(bt.items) == 0 {
		close(bt.done)
		return
	}
	chunks := make([]encodedChunk, len(bt.items))
	for i, it := range bt.items {
		chunks[i] = it.chunk
	}
	token := uuid.New()
	var res map[string]streamWrite
	err := retryTransient(ctx, opts.retryTimeout, nil, func() error {
		var err error
		res, err = b.st.insertChunks(ctx, b.st.q, chunks, token)
		if isBatchTokenConflict(err) {
			res, err = b.recordedOutcome(ctx, token, chunks)
		}
		return err
	}, func(attempt int, err error) {
		b.st.shared.stats.retries.Add(1)
		opts.logger.Warn().Err(err).Int("attempt", attempt).Int("chunks", len(chunks)).Msg("stream write failed, retrying")
	})
	if err != nil {
		b.st.shared.stats.failures.Add(1)
	} else {
		b.st.shared.stats.batches.Add(1)
		b.st.shared.stats.chunks.Add(int64(len(chunks)))
	}
	for _, it := range bt.items {
		itemErr := err
		if err == nil {
			w, ok := res[it.chunk.streamID]
			itemErr = writeError(it.chunk.streamID, w, ok, it.chunk.fence != store.Fence{})
		}
		if itemErr != nil {
			it.w.fail(fmt.Errorf("store: write to stream %s: %w", it.chunk.streamID, itemErr))
		}
	}
	close(bt.done)
	if time.Since(b.lastPrune) > 10*time.Minute {
		b.lastPrune = time.Now()
		if _, perr := b.st.q.Exec(ctx, `DELETE FROM helix.stream_write_batches WHERE created_at < now() - interval '1 hour'`); perr != nil {
			opts.logger.Warn().Err(perr).Msg("pruning stream write batch tokens failed")
		}
	}
}

// guardItems drops the items of writers that failed (an earlier batch of
// theirs was not written: their later chunks would follow a gap) and of
// writers whose guard refuses the write now, failing those writers; each
// writer is decided once per batch.
func guardItems(ctx context.Context, items []batchItem) []batchItem {
	dropped := map[*writer]bool{}
	kept := items[:0]
	for _, it := range items {
		w := it.w
		drop, decided := dropped[w]
		if !decided {
			drop = w.refuses(ctx)
			dropped[w] = drop
		}
		if !drop {
			kept = append(kept, it)
		}
	}
	return kept
}

// refuses reports whether w writes nothing now: it failed, or its guard
// refuses (which fails it).
func (w *writer) refuses(ctx context.Context) bool {
	if err, _ := w.state(); err != nil {
		return true
	}
	if w.guard == nil {
		return false
	}
	if err := w.guard(ctx); err != nil {
		w.fail(fmt.Errorf("store: write to stream %s: %w", w.streamID, err))
		return true
	}
	return false
}

// recordedOutcome reads the outcome of a batch that committed although its
// acknowledgement was lost.
func (b *batcher) recordedOutcome(ctx context.Context, token uuid.UUID, chunks []encodedChunk) (map[string]streamWrite, error) {
	var written []string
	if err := b.st.q.QueryRow(ctx, `SELECT streams FROM helix.stream_write_batches WHERE batch_id = $1`, token).Scan(&written); err != nil {
		return nil, fmt.Errorf("look up committed batch %s: %w", token, err)
	}
	out := map[string]streamWrite{}
	for _, c := range chunks {
		out[c.streamID] = streamWrite{status: helix.StreamStatus("unknown")}
	}
	for _, id := range written {
		out[id] = streamWrite{status: helix.StreamActive, written: true}
	}
	return out, nil
}

func isBatchTokenConflict(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == codeUniqueViolation && pe.ConstraintName == "stream_write_batches_pkey"
}

// retryableError reports errors worth retrying: the connection failed or
// the server asked us to retry. Anything else (bad data, a missing stream,
// a typed helix error) fails at once.
func retryableError(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var nf *helix.NotFoundError
	var tr *helix.StreamTruncatedError
	if errors.As(err, &nf) || errors.As(err, &tr) {
		return false
	}
	// A stream's state answers the same on every attempt: EndStream on a
	// failed stream retried its StreamNotActiveError for the whole retry
	// timeout (10 s) before returning it.
	if errors.Is(err, helix.ErrStreamNotActive) || errors.Is(err, helix.ErrStreamFailed) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case len(pe.Code) >= 2 && pe.Code[:2] == "08", // connection exception
			len(pe.Code) >= 3 && pe.Code[:3] == "57P", // operator intervention (shutdown)
			pe.Code == "40001", pe.Code == "40P01", pe.Code == "53300":
			return true
		}
		return false
	}
	return true // network-level failure: the token makes a retry safe
}

// retryTransient runs fn until it succeeds, fails with an error that is not
// retryableError, or timeout has passed, backing off from 50 ms to 1 s
// between attempts; onRetry hears of each retried failure. It gives up
// early when ctx ends or stop (if not nil) is closed, returning ctx's error
// or errReaderClosed.
func retryTransient(ctx context.Context, timeout time.Duration, stop <-chan struct{}, fn func() error, onRetry func(attempt int, err error)) error {
	deadline := time.Now().Add(timeout)
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !retryableError(err) || time.Now().Add(backoff).After(deadline) {
			return err
		}
		onRetry(attempt, err)
		select {
		case <-time.After(backoff):
		case <-stop:
			return errReaderClosed
		case <-ctx.Done():
			return ctx.Err()
		}
		backoff = min(backoff*2, time.Second)
	}
}

func (b *batcher) close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	close(b.stop)
	<-b.done
	return nil
}

// writer implements store.Writer on the store's batcher.
type writer struct {
	st       *Store
	streamID string
	runID    string
	attempt  int
	guard    func(context.Context) error
	fence    store.Fence // zero: none

	mu     sync.Mutex
	err    error  // sticky: the first failed write
	last   *batch // batch holding this writer's latest chunk
	closed bool
}

// NewWriter implements store.StreamStore.
func (s *Store) NewWriter(streamID string, opts *store.WriterOptions) store.Writer {
	w := &writer{st: s, streamID: streamID}
	if opts != nil {
		w.runID, w.attempt, w.guard = opts.RunID, opts.Attempt, opts.Guard
		if opts.Fence != nil {
			w.fence = *opts.Fence
		}
	}
	return w
}

func (w *writer) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

func (w *writer) state() (error, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err, w.closed
}

// Write implements store.Writer.
func (w *writer) Write(ctx context.Context, c helix.Chunk) error {
	return w.write(ctx, c, !c.ChunkType().IsDelta())
}

// Queue implements store.Writer.
func (w *writer) Queue(ctx context.Context, c helix.Chunk) error {
	return w.write(ctx, c, false)
}

// write enqueues c; an urgent chunk flushes its batch now and is awaited.
func (w *writer) write(ctx context.Context, c helix.Chunk, urgent bool) error {
	enc, err := encodeChunk(w.streamID, c, w.runID, w.attempt)
	if err != nil {
		return fmt.Errorf("store: write to stream %s: %w", w.streamID, err)
	}
	enc.fence = w.fence
	if err, closed := w.state(); err != nil || closed {
		if closed {
			return fmt.Errorf("store: write to stream %s: writer is closed", w.streamID)
		}
		return err
	}
	b, err := w.st.batcher()
	if err != nil {
		return err
	}
	bt, err := b.enqueue(ctx, w, enc, urgent)
	if err != nil {
		return err
	}
	if urgent {
		return w.wait(ctx, bt)
	}
	err, _ = w.state()
	return err
}

func (w *writer) wait(ctx context.Context, bt *batch) error {
	select {
	case <-bt.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	err, _ := w.state()
	return err
}

// Flush implements store.Writer.
func (w *writer) Flush(ctx context.Context) error {
	w.mu.Lock()
	last := w.last
	w.mu.Unlock()
	if last == nil {
		err, _ := w.state()
		return err
	}
	b, err := w.st.batcher()
	if err == nil {
		b.mu.Lock()
		if b.cur == last {
			last.urgent = true
			wake(b.kick)
		}
		b.mu.Unlock()
	} else if !errors.Is(err, errClosed) {
		return err
	}
	return w.wait(ctx, last)
}

// Close implements store.Writer.
func (w *writer) Close(ctx context.Context) error {
	err := w.Flush(ctx)
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	return err
}
