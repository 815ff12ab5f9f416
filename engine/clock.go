package engine

import "github.com/helix-agents/helix-dbos/steps"

// Clock (steps.Clock: Now, and Advanced, closed when the clock jumps
// forward) is the engine's time for the deadlines of calls that wait for
// people (Config.Clock): the store stamps a call's start, answer and
// timeout with Now, a run's wait times out once Now passes the call's
// stored deadline, and the wake-up sweep ages answers by it. Production
// engines leave Config.Clock nil (the real time); helixtest.Clock is one a
// test moves forward, so a week-long wait passes in a moment with the same
// durable outcome as in production.
type Clock = steps.Clock

// clock returns the configured clock or the real time.
func (c *Config) clock() Clock {
	if c.Clock == nil {
		return steps.SystemClock{}
	}
	return c.Clock
}
