package steps

import (
	"context"
	"sync"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// messageCache keeps the message logs of sessions this process is running,
// so a step loads only the messages appended since the previous one and the
// per-step cost does not grow with the conversation. The log is append-only
// except for retry and recovery truncations; the cache is validated against
// the durable message count and reloaded on any mismatch.
type messageCache struct {
	mu sync.Mutex
	m  map[string]*cachedLog
}

// cachedLog is a session's log, buf[1:], behind one free slot: buf[0] takes
// a request's system message, so a model request is a slice of the log,
// not a copy of it (a copy per step grows with the conversation, and so
// does the garbage collector's work).
type cachedLog struct {
	mu  sync.Mutex
	buf []helix.Message
}

// n is the number of messages in the log.
func (l *cachedLog) n() int { return max(len(l.buf)-1, 0) }

// add appends messages to the log.
func (l *cachedLog) add(msgs ...helix.Message) {
	if len(l.buf) == 0 {
		l.buf = make([]helix.Message, 1, 1+max(len(msgs), 64))
	}
	l.buf = append(l.buf, msgs...)
}

func (c *messageCache) log(sessionID string) *cachedLog {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.m[sessionID]
	if !ok {
		l = &cachedLog{}
		c.m[sessionID] = l
	}
	return l
}

// Forget drops a session's cached log (at the end of a run).
func (e *Env) Forget(sessionID string) {
	e.cache.mu.Lock()
	delete(e.cache.m, sessionID)
	e.cache.mu.Unlock()
}

// Remember records messages a commit appended, ending at position count, in
// the session's cached log. A log that does not reach their first position
// is left alone: the next step loads what it lacks.
func (e *Env) Remember(sessionID string, count int, msgs []helix.Message) {
	from := count - len(msgs)
	if from < 0 {
		return
	}
	l := e.cache.log(sessionID)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.n() < from:
		return
	case l.n() == from:
		// In place, amortized: the slices handed out end at or before
		// from, so nothing they hold changes.
		l.add(msgs...)
	default:
		// Over positions a caller may still hold: a copy.
		old := l.buf[1 : 1+from]
		l.buf = nil
		l.add(old...)
		l.add(msgs...)
	}
}

// Messages returns the session's first count messages (count is the durable
// message count read in the same step), loading only what the cache lacks.
// The slice is the cache's: read it, never modify it.
func (e *Env) Messages(ctx context.Context, sessionID string, count int) ([]helix.Message, error) {
	return e.request(ctx, sessionID, count, nil)
}

// request is Messages preceded by system when it is not nil: the cache's
// memory, with the system message in the slot before the log.
func (e *Env) request(ctx context.Context, sessionID string, count int, system *helix.Message) ([]helix.Message, error) {
	l := e.cache.log(sessionID)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n() > count { // truncated by a retry: reload
		l.buf = nil
	}
	for l.n() < count {
		page, err := e.Store.GetMessages(ctx, sessionID, &store.GetMessagesOptions{Offset: l.n(), Limit: store.MaxPageSize})
		if err != nil {
			l.buf = nil
			return nil, err
		}
		if len(page.Messages) == 0 {
			break
		}
		l.add(page.Messages...)
	}
	if len(l.buf) == 0 {
		l.add()
	}
	end := 1 + min(count, l.n())
	if system == nil {
		return l.buf[1:end:end], nil
	}
	l.buf[0] = *system
	return l.buf[0:end:end], nil
}
