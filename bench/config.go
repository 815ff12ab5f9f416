package bench

import (
	"cmp"
	"errors"
	"fmt"
	"sync"
)

// Defaults of Config.
const (
	// DefaultSteps is the length of the sequential session: long enough
	// that a per-step cost growing with history shows.
	DefaultSteps = 1000
	// DefaultSessions is the number of concurrent sessions.
	DefaultSessions = 32
	// DefaultStepsPerSession is the length of each concurrent session.
	DefaultStepsPerSession = 100
	// DefaultFloorSteps is the number of no-op DBOS steps, skeleton
	// iterations and single-row commits measured for the floors.
	DefaultFloorSteps = 1000
	// DefaultWarmupSteps is the length of the unreported warm-up session.
	DefaultWarmupSteps = 20
	// DefaultHITLSamples is the number of human-in-the-loop sessions, one
	// sample each.
	DefaultHITLSamples = 200
	// DefaultStreamSessions is the number of concurrent token streams: the
	// number the streaming target is set for.
	DefaultStreamSessions = TargetStreams
	// DefaultStreamDeltas is the number of token deltas each stream
	// writes, one every 20 ms (2 s of streaming).
	DefaultStreamDeltas = 100
)

// Config configures Run. Only DatabaseURL is required.
type Config struct {
	// DatabaseURL is the Postgres database to measure against. Run migrates
	// it and writes bench sessions (agent type AgentName) and DBOS
	// workflows into it, and creates then drops a one-column probe table
	// (ProbeTable): use a scratch database.
	DatabaseURL string
	// Steps is the length of the sequential session (default DefaultSteps,
	// at least 2).
	Steps int
	// Sessions is the number of concurrent sessions (default
	// DefaultSessions).
	Sessions int
	// StepsPerSession is the length of each concurrent session (default
	// DefaultStepsPerSession, at least 2).
	StepsPerSession int
	// FloorSteps is the sample count of each floor measurement (default
	// DefaultFloorSteps, at least 2).
	FloorSteps int
	// WarmupSteps is the length of the warm-up session; default
	// DefaultWarmupSteps, negative for none.
	WarmupSteps int
	// HITLSamples is the number of human-in-the-loop sessions, run one
	// after the other, each suspended on a client tool and answered with
	// SubmitToolResult (one latency sample each); default
	// DefaultHITLSamples, negative for none.
	HITLSamples int
	// StreamSessions is the number of token streams the streaming phase
	// runs together, each in a session of agent type StreamAgentType
	// (default DefaultStreamSessions, at least 1).
	StreamSessions int
	// StreamDeltas is the number of text deltas each stream writes, one
	// every 20 ms, and its reader times (one latency sample each); default
	// DefaultStreamDeltas, negative for no streaming phase.
	StreamDeltas int
	// MaxConns overrides the pool size; 0 keeps pgx's default (or the URL's
	// pool_max_conns), which is what an engine built from a URL gets.
	MaxConns int
	// KeepSamples keeps the sequential session's every overhead sample
	// (Sequential.SamplesMS) and every human-in-the-loop sample
	// (HITL.SamplesMS) in the report, for plots.
	KeepSamples bool
	// TxTool makes the bench tool transactional (helix.NewTxTool): each
	// call INSERTs one row into TxEffectsTable in its transaction, which
	// commits the row with the call's record. Run creates the table and
	// drops it at the end.
	TxTool bool
	// Progress receives a line now and then while Run works, from more
	// than one goroutine but never concurrently; nil is silent.
	Progress func(string)
}

func (c *Config) withDefaults() error {
	c.Steps = cmp.Or(c.Steps, DefaultSteps)
	c.Sessions = cmp.Or(c.Sessions, DefaultSessions)
	c.StepsPerSession = cmp.Or(c.StepsPerSession, DefaultStepsPerSession)
	c.FloorSteps = cmp.Or(c.FloorSteps, DefaultFloorSteps)
	c.WarmupSteps = cmp.Or(c.WarmupSteps, DefaultWarmupSteps)
	c.HITLSamples = cmp.Or(c.HITLSamples, DefaultHITLSamples)
	c.StreamSessions = cmp.Or(c.StreamSessions, DefaultStreamSessions)
	c.StreamDeltas = cmp.Or(c.StreamDeltas, DefaultStreamDeltas)
	c.Progress = serialProgress(c.Progress)
	return c.validate()
}

// serialProgress returns a Progress function that calls progress from one
// goroutine at a time, or does nothing when progress is nil.
func serialProgress(progress func(string)) func(string) {
	if progress == nil {
		return func(string) {}
	}
	var mu sync.Mutex
	return func(s string) {
		mu.Lock()
		defer mu.Unlock()
		progress(s)
	}
}

func (c *Config) validate() error {
	switch {
	case c.DatabaseURL == "":
		return errors.New("bench: Config.DatabaseURL is empty: give the URL of a scratch database")
	case c.Steps < 2:
		return fmt.Errorf("bench: Steps must be >= 2 (one overhead sample needs two steps), got %d", c.Steps)
	case c.Sessions < 1:
		return fmt.Errorf("bench: Sessions must be >= 1, got %d", c.Sessions)
	case c.StepsPerSession < 2:
		return fmt.Errorf("bench: StepsPerSession must be >= 2, got %d", c.StepsPerSession)
	case c.FloorSteps < 2:
		return fmt.Errorf("bench: FloorSteps must be >= 2, got %d", c.FloorSteps)
	case c.StreamSessions < 1:
		return fmt.Errorf("bench: StreamSessions must be >= 1, got %d", c.StreamSessions)
	case c.MaxConns < 0:
		return fmt.Errorf("bench: MaxConns must be >= 0 (0 for the pool's default), got %d", c.MaxConns)
	}
	return nil
}
