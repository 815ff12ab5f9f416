package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// announcer sends the store's notifications off the callers' write paths:
// Announce hands it a NOTIFY that a committed transaction left to its
// caller, and one goroutine sends all those waiting in one statement of
// its own, as soon as the last one is out. At a low rate each goes at
// once; under load they coalesce into one statement per round trip.
//
// Why: Postgres takes its notification queue lock at the commit of every
// transaction that notifies, and holds it until the commit is done (for a
// transaction that wrote, until its commit record is flushed). Callers
// that each notify in, or right after, their own transaction queue behind
// each other's commits on that lock. DBOS moved its own notifications off
// its write paths for the same reason (its migrations 43 and 44).
type announcer struct {
	exec func(ctx context.Context, sql string, args ...any) error
	log  zerolog.Logger

	mu      sync.Mutex
	pending map[announcement]struct{}
	wake    chan struct{}
	stopped chan struct{}
	done    chan struct{}
}

type announcement struct{ channel, payload string }

// announceTimeout bounds one flush: notifications are hints, and what a
// lost one announced is found by the engines' sweeps and the readers'
// polls.
const announceTimeout = 10 * time.Second

func newAnnouncer(exec func(ctx context.Context, sql string, args ...any) error, log zerolog.Logger) *announcer {
	a := &announcer{exec: exec, log: log, pending: map[announcement]struct{}{},
		wake: make(chan struct{}, 1), stopped: make(chan struct{}), done: make(chan struct{})}
	go a.loop()
	return a
}

// announce queues NOTIFY payload on channel; the same one queued twice
// before it goes out is sent once.
func (a *announcer) announce(channel, payload string) {
	a.mu.Lock()
	a.pending[announcement{channel, payload}] = struct{}{}
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *announcer) loop() {
	defer close(a.done)
	for {
		select {
		case <-a.wake:
		case <-a.stopped:
			a.flush() // what was queued before the stop
			return
		}
		a.flush()
	}
}

// flush sends what is queued, in one statement.
func (a *announcer) flush() {
	a.mu.Lock()
	if len(a.pending) == 0 {
		a.mu.Unlock()
		return
	}
	channels, payloads := make([]string, 0, len(a.pending)), make([]string, 0, len(a.pending))
	for p := range a.pending {
		channels, payloads = append(channels, p.channel), append(payloads, p.payload)
	}
	clear(a.pending)
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), announceTimeout)
	err := a.exec(ctx, `SELECT count(pg_notify(c, p)) FROM unnest($1::text[], $2::text[]) AS t(c, p)`, channels, payloads)
	cancel()
	if err != nil {
		a.log.Warn().Err(err).Str("event", "announce.failed").Int("notifications", len(channels)).
			Msg("notifications of committed writes were not sent: the engines' sweeps and the readers' polls find what they announced")
	}
}

// stop sends what is queued and stops the goroutine.
func (a *announcer) stop() {
	close(a.stopped)
	<-a.done
}
