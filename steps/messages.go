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

type cachedLog struct {
	mu   sync.Mutex
	msgs []helix.Message
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
	if len(l.msgs) < from {
		return
	}
	l.msgs = append(l.msgs[:from:from], msgs...)
}

// Messages returns the session's first count messages (count is the durable
// message count read in the same step), loading only what the cache lacks.
func (e *Env) Messages(ctx context.Context, sessionID string, count int) ([]helix.Message, error) {
	l := e.cache.log(sessionID)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.msgs) > count { // truncated by a retry: reload
		l.msgs = nil
	}
	for len(l.msgs) < count {
		page, err := e.Store.GetMessages(ctx, sessionID, &store.GetMessagesOptions{Offset: len(l.msgs), Limit: store.MaxPageSize})
		if err != nil {
			l.msgs = nil
			return nil, err
		}
		if len(page.Messages) == 0 {
			break
		}
		l.msgs = append(l.msgs, page.Messages...)
	}
	if len(l.msgs) > count {
		l.msgs = l.msgs[:count]
	}
	return l.msgs[:len(l.msgs):len(l.msgs)], nil
}
