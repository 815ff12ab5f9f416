package postgres

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
)

// notifier holds the store's single LISTEN connection and fans
// notifications out to the readers of each stream. A notification is only a
// hint: readers re-query the table, and poll when none arrives.
type notifier struct {
	connect func(ctx context.Context) (*pgx.Conn, error)
	channel string
	log     zerolog.Logger

	mu   sync.Mutex
	subs map[string]map[*subscription]struct{}
	// taps see every payload (Store.WatchPayloads), and "" at each connect.
	taps map[*tap]struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

// subscription receives a wake-up (coalesced) whenever its stream may have
// changed.
type subscription struct {
	n        *notifier
	streamID string
	c        chan struct{}
}

func newNotifier(connect func(ctx context.Context) (*pgx.Conn, error), channel string, log zerolog.Logger) *notifier {
	ctx, cancel := context.WithCancel(context.Background())
	n := &notifier{
		connect: connect,
		channel: channel,
		log:     log,
		subs:    map[string]map[*subscription]struct{}{},
		cancel:  cancel,
		done:    make(chan struct{}),
	}
	go n.run(ctx)
	return n
}

func (n *notifier) subscribe(streamID string) *subscription {
	s := &subscription{n: n, streamID: streamID, c: make(chan struct{}, 1)}
	n.mu.Lock()
	defer n.mu.Unlock()
	set := n.subs[streamID]
	if set == nil {
		set = map[*subscription]struct{}{}
		n.subs[streamID] = set
	}
	set[s] = struct{}{}
	return s
}

func (s *subscription) close() {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if set := n.subs[s.streamID]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(n.subs, s.streamID)
		}
	}
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (n *notifier) wakeStream(streamID string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for s := range n.subs[streamID] {
		wake(s.c)
	}
}

// tap receives every payload of its channel (Store.WatchPayloads).
type tap struct{ fn func(payload string) }

func (n *notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, set := range n.subs {
		for s := range set {
			wake(s.c)
		}
	}
	for t := range n.taps {
		t.fn("")
	}
}

// run keeps a LISTEN connection open until close, reconnecting with backoff.
// After every (re)connect it wakes every reader, since notifications sent
// while disconnected are lost.
func (n *notifier) run(ctx context.Context) {
	defer close(n.done)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := n.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		n.log.Warn().Err(err).Dur("retry_in", backoff).Msg("stream listener disconnected")
		n.wakeAll()
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (n *notifier) listen(ctx context.Context) error {
	conn, err := n.connect(ctx)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{n.channel}.Sanitize()); err != nil {
		return err
	}
	n.wakeAll()
	for {
		note, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		for id := range strings.SplitSeq(note.Payload, "\n") {
			n.wakeStream(id)
			n.tapPayload(id)
		}
	}
}

func (n *notifier) tapPayload(payload string) {
	if payload == "" {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for t := range n.taps {
		t.fn(payload)
	}
}

func (n *notifier) close() {
	n.cancel()
	<-n.done
}
