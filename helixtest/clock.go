package helixtest

import (
	"fmt"
	"sync"
	"time"

	"github.com/helix-agents/helix-dbos/engine"
)

// Clock is a clock a test moves forward, so that a client tool's 24-hour
// deadline (helix.ClientTimeout) passes, or an approval waits a week, in a
// moment. Give it to an engine with EngineOptions.Clock: it becomes the
// engine's time for the calls that wait for people (engine.Config.Clock),
// and only for them. When a call started waiting, its deadline, when it
// was answered or timed out: all are read on it and stored as they would
// be in production, so a deadline that passes on the Clock times the call
// out exactly as a real one would (the model sees the timeout error, the
// stream and usage record it, a late answer is refused).
//
// A Clock reads the real time plus every [Clock.Advance] so far: between
// advances it runs at the speed of real time, so everything that measures
// real time in the engine (leases, polls, the wake-up sweep) behaves as in
// production. The zero value is ready to use and reads the real time.
//
// The clock lives in the test's memory; the deadline is stored durably as
// an absolute time on it. An engine that replaces a crashed one on the same
// sessions must be given the same Clock (EngineOptions.Clock), or it
// measures the stored deadlines against the real time, possibly days
// before them. Engines with a queue (EngineOptions.Queue) refuse a Clock: a
// queued run's driver waits for a deadline in real time. Answer through the
// kit's engine ([Engine.Answer], [Engine.Approve], [Engine.Submit]): an
// engine.Client reads the real time, so the wait it records for a call
// answered after an Advance would be off by the advance.
//
// A Clock is safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	offset time.Duration
	// advanced is closed, and replaced, by the next Advance.
	advanced chan struct{}
}

var _ engine.Clock = (*Clock)(nil)

// Now returns the real time plus every advance so far.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Advance moves the clock forward by d and returns the new time. The
// engine's runs that wait for a call whose deadline has now passed wake up
// and time the call out, a moment after Advance returns: wait for the
// outcome with [Engine.Await] or [Engine.Result]. A call answered before
// its deadline passed on the clock keeps its answer. Advance panics if d is
// negative: time only moves forward.
func (c *Clock) Advance(d time.Duration) time.Time {
	if d < 0 {
		panic(fmt.Sprintf("helixtest: Clock.Advance(%s): time only moves forward", d))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
	if c.advanced != nil {
		close(c.advanced)
		c.advanced = nil
	}
	return time.Now().Add(c.offset)
}

// Advanced implements engine.Clock: the returned channel is closed by the
// next Advance.
func (c *Clock) Advanced() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.advanced == nil {
		c.advanced = make(chan struct{})
	}
	return c.advanced
}
