package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/helix-agents/helix-dbos/store"
)

// Defaults of the store's options.
const (
	// DefaultFlushInterval bounds how long a buffered delta waits before its
	// batch is written.
	DefaultFlushInterval = 20 * time.Millisecond
	// DefaultMaxBatch is the number of pending chunks that triggers an
	// immediate flush.
	DefaultMaxBatch = 256
	// DefaultPollInterval is how often a waiting reader re-queries when no
	// notification arrives.
	DefaultPollInterval = time.Second
	// DefaultRetryTimeout bounds how long stream writes and reads retry
	// transient database errors (a dropped connection, a restarting server)
	// before the caller sees the error.
	DefaultRetryTimeout = 10 * time.Second
	// DefaultNotifyChannel is the LISTEN/NOTIFY channel of stream writes.
	DefaultNotifyChannel = "helix_stream"
)

var channelName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Option configures a [Store].
type Option func(*options)

type options struct {
	flushInterval time.Duration
	maxBatch      int
	pollInterval  time.Duration
	retryTimeout  time.Duration
	notifyChannel string
	logger        zerolog.Logger
	now           func() time.Time // WithClock; nil: time.Now
	formats       *FormatGate      // WithFormatGate; nil: FormatLevelNewest
}

// WithFlushInterval sets how long deltas may be buffered (default
// DefaultFlushInterval). Must be positive.
func WithFlushInterval(d time.Duration) Option { return func(o *options) { o.flushInterval = d } }

// WithMaxBatch sets the pending-chunk count that forces a flush (default
// DefaultMaxBatch). Must be >= 1.
func WithMaxBatch(n int) Option { return func(o *options) { o.maxBatch = n } }

// WithPollInterval sets the fallback poll of waiting readers (default
// DefaultPollInterval). Must be positive.
func WithPollInterval(d time.Duration) Option { return func(o *options) { o.pollInterval = d } }

// WithRetryTimeout sets how long stream writes and reads retry transient
// database errors (default DefaultRetryTimeout). Must be positive.
func WithRetryTimeout(d time.Duration) Option {
	return func(o *options) { o.retryTimeout = d }
}

// WithNotifyChannel sets the LISTEN/NOTIFY channel (default
// DefaultNotifyChannel). Stores that share a database must agree on it.
func WithNotifyChannel(name string) Option { return func(o *options) { o.notifyChannel = name } }

// WithLogger sets the logger for background events (listener reconnects,
// write retries). The default is silent.
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.logger = l } }

func (o *options) withDefaults() {
	o.flushInterval = cmp.Or(o.flushInterval, DefaultFlushInterval)
	o.maxBatch = cmp.Or(o.maxBatch, DefaultMaxBatch)
	o.pollInterval = cmp.Or(o.pollInterval, DefaultPollInterval)
	o.retryTimeout = cmp.Or(o.retryTimeout, DefaultRetryTimeout)
	o.notifyChannel = cmp.Or(o.notifyChannel, DefaultNotifyChannel)
}

func (o *options) validate() error {
	switch {
	case o.flushInterval < 0:
		return fmt.Errorf("postgres: flush interval must be > 0, got %s", o.flushInterval)
	case o.maxBatch < 1:
		return fmt.Errorf("postgres: max batch must be >= 1, got %d", o.maxBatch)
	case o.pollInterval < 0:
		return fmt.Errorf("postgres: poll interval must be > 0, got %s", o.pollInterval)
	case o.retryTimeout < 0:
		return fmt.Errorf("postgres: retry timeout must be > 0, got %s", o.retryTimeout)
	case !channelName.MatchString(o.notifyChannel):
		return fmt.Errorf("postgres: notify channel %q must be a plain lower-case identifier ([a-z_][a-z0-9_]*, at most 63 bytes)", o.notifyChannel)
	}
	return nil
}

// Store implements store.SessionStore and store.StreamStore on Postgres.
// It is safe for concurrent use. Close it to stop its background goroutines.
type Store struct {
	q      Querier // where session methods run
	inTx   bool    // q is a caller's transaction
	shared *shared
}

// shared is the state common to a Store and its WithQuerier views.
type shared struct {
	pool *pgxpool.Pool
	opts options

	mu       sync.Mutex
	closed   bool
	batcher  *batcher
	notifier *notifier
	// announcer sends the notifications callers leave to it (Announce).
	announcer *announcer
	// watchers are the LISTEN connections of Watch, by channel.
	watchers map[string]*notifier

	stats streamStats
}

// streamStats counts stream write activity (see Store.StreamStats).
type streamStats struct {
	batches, chunks, retries, failures atomic.Int64
}

// StreamStats are cumulative counters of a store's batched chunk writes.
type StreamStats struct {
	// Batches is the number of batch INSERT statements that committed.
	Batches int64
	// Chunks is the number of chunks those batches wrote.
	Chunks int64
	// Retries counts batch attempts repeated after a transient error.
	Retries int64
	// Failures counts batches that failed for good.
	Failures int64
}

// StreamStats returns the store's batched-write counters (writes through
// Writers; Append and the stream lifecycle methods are not counted).
func (s *Store) StreamStats() StreamStats {
	st := &s.shared.stats
	return StreamStats{Batches: st.batches.Load(), Chunks: st.chunks.Load(), Retries: st.retries.Load(), Failures: st.failures.Load()}
}

var (
	_ store.SessionStore = (*Store)(nil)
	_ store.StreamStore  = (*Store)(nil)
)

// New returns a store on pool. The pool must reach a database migrated with
// package migrations. New does not take ownership of the pool: Close the
// store before closing the pool.
func New(pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, errors.New("postgres: pool is nil: pass the *pgxpool.Pool to store helix data in")
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	return &Store{q: PgxQuerier(pool), shared: &shared{pool: pool, opts: o}}, nil
}

// Pool returns the pool the store was built on.
func (s *Store) Pool() *pgxpool.Pool { return s.shared.pool }

// WithQuerier returns a view of the store whose session-store methods run on
// q, typically the transaction of a durable step, so they commit or roll
// back with it. Multi-statement methods run directly on q (it already
// provides atomicity). Append and the stream lifecycle methods (EndStream,
// FailStream, ReactivateStream, CleanupToStep, ResetStream) join q as well;
// Writers and Readers keep using the pool.
func (s *Store) WithQuerier(q Querier) *Store {
	return &Store{q: q, inTx: true, shared: s.shared}
}

// Close flushes pending stream writes and stops the store's background
// goroutines (the batch writer and the LISTEN connection). Readers still
// open return an error afterwards. It does not close the pool. Idempotent.
func (s *Store) Close() error {
	sh := s.shared
	sh.mu.Lock()
	if sh.closed {
		sh.mu.Unlock()
		return nil
	}
	sh.closed = true
	b, n, ws, a := sh.batcher, sh.notifier, sh.watchers, sh.announcer
	sh.mu.Unlock()
	if a != nil {
		a.stop() // sends what is queued
	}
	var errs []error
	if b != nil {
		errs = append(errs, b.close())
	}
	if n != nil {
		n.close()
	}
	for _, w := range ws {
		w.close()
	}
	return errors.Join(errs...)
}

// Watch wakes its caller whenever a NOTIFY on channel carries key as its
// payload (or as one of its lines), and whenever the store's LISTEN
// connection for channel (one per channel, opened on first use) connects
// again, since notifications sent while it was away are lost. Wake-ups are
// coalesced and only hints: re-read what they are about. Call stop when
// done watching.
func (s *Store) Watch(channel, key string) (wake <-chan struct{}, stop func(), err error) {
	n, err := s.watcher(channel)
	if err != nil {
		return nil, nil, err
	}
	sub := n.subscribe(key)
	return sub.c, sub.close, nil
}

// watcher returns the store's LISTEN connection for channel, opening it on
// first use.
func (s *Store) watcher(channel string) (*notifier, error) {
	sh := s.shared
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		return nil, errClosed
	}
	n := sh.watchers[channel]
	if n == nil {
		if sh.watchers == nil {
			sh.watchers = map[string]*notifier{}
		}
		connect := func(ctx context.Context) (*pgx.Conn, error) {
			return pgx.ConnectConfig(ctx, sh.pool.Config().ConnConfig.Copy())
		}
		n = newNotifier(connect, channel, sh.opts.logger)
		sh.watchers[channel] = n
	}
	return n, nil
}

// Watching reports how many Watch calls on channel for key are active:
// how a benchmark or a test knows that a wait has begun.
func (s *Store) Watching(channel, key string) int {
	sh := s.shared
	sh.mu.Lock()
	n := sh.watchers[channel]
	sh.mu.Unlock()
	if n == nil {
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.subs[key])
}

// Announce sends NOTIFY payload on channel in a statement of its own,
// shortly after it returns: for a notification of writes that committed,
// sent off the caller's write path. Announcements queued while one is
// being sent go out together, in one statement. They are hints: one that
// fails is logged (event announce.failed), and what it announced is found
// by the engines' sweeps and the readers' polls. Close sends what is
// queued. On a closed store it does nothing.
func (s *Store) Announce(channel, payload string) {
	sh := s.shared
	sh.mu.Lock()
	if sh.closed {
		sh.mu.Unlock()
		return
	}
	if sh.announcer == nil {
		exec := func(ctx context.Context, sql string, args ...any) error {
			_, err := sh.pool.Exec(ctx, sql, args...)
			return err
		}
		sh.announcer = newAnnouncer(exec, sh.opts.logger)
	}
	a := sh.announcer
	sh.mu.Unlock()
	a.announce(channel, payload)
}

// errClosed is returned by stream operations on a closed store.
var errClosed = errors.New("postgres: store is closed")

// tx runs fn atomically: directly on the caller's transaction for a
// WithQuerier view, otherwise in a new transaction on the pool.
func (s *Store) tx(ctx context.Context, fn func(q Querier) error) error {
	if s.inTx {
		return fn(s.q)
	}
	tx, err := s.shared.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(PgxQuerier(tx)); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// listener returns the store's notifier, starting it on first use.
func (s *Store) listener() (*notifier, error) {
	sh := s.shared
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		return nil, errClosed
	}
	if sh.notifier == nil {
		connect := func(ctx context.Context) (*pgx.Conn, error) {
			return pgx.ConnectConfig(ctx, sh.pool.Config().ConnConfig.Copy())
		}
		sh.notifier = newNotifier(connect, sh.opts.notifyChannel, sh.opts.logger)
	}
	return sh.notifier, nil
}
