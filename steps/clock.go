package steps

import "time"

// Clock is where the durable deadline logic of tool calls that wait for
// people reads the time: a run's wait for a client tool's result or an
// approval (workflows) times out once Now passes the call's stored
// deadline. [SystemClock] is the real time; a test kit sets another one
// (engine.Config.Clock) to move time forward without waiting.
//
// The deadline is stored as an absolute time (Unix ms), so every process
// that may wait for a session must read the same clock.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Advanced returns a channel that is closed the next time the clock
	// moves forward other than by the passing of real time: a wait then
	// reads Now again. Take it before reading Now, so a move between the
	// two is never missed. A clock that only follows real time returns
	// nil (a wait then costs nothing more than its timer).
	Advanced() <-chan struct{}
}

// SystemClock is the real time, the clock of every engine that is not
// given one.
type SystemClock struct{}

var _ Clock = SystemClock{}

// Now implements Clock: time.Now.
func (SystemClock) Now() time.Time { return time.Now() }

// Advanced implements Clock: real time never jumps (nil).
func (SystemClock) Advanced() <-chan struct{} { return nil }
