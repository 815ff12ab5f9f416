package engine

import (
	"time"

	"github.com/helix-agents/helix-dbos/steps"
)

// Clock is the engine's time for the deadlines of calls that wait for
// people (Config.Clock): the store stamps a call's start, answer and
// timeout with Now, a run's wait times out once Now passes the call's
// stored deadline, and the wake-up sweep ages answers by it. Production
// engines leave Config.Clock nil (the real time); helixtest.Clock is one a
// test moves forward, so a week-long wait passes in a moment with the same
// durable outcome as in production.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Advanced returns a channel that is closed the next time the clock
	// moves forward other than by the passing of real time (a waiting run
	// then reads Now again); nil for a clock that only follows real time.
	// The engine takes it before it reads Now, so a move between the two
	// is never missed.
	Advanced() <-chan struct{}
}

// The engine hands its Clock to the steps and workflows.
var _ steps.Clock = Clock(nil)

// clock returns the configured clock or the real time.
func (c *Config) clock() Clock {
	if c.Clock == nil {
		return steps.SystemClock{}
	}
	return c.Clock
}
