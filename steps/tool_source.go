package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// NamePinTools is the step that gives a run the tools of its agent's
// sources (helix.Agent.ToolSources): listed once per run and recorded on
// the run's row, so that every execution of the run (a replay, a later
// segment, a continuation after hibernation, a takeover) and the resume
// that finishes its suspended step offer the model the same list.
const NamePinTools = "helix.pin_tools"

// PinToolsInput is a run whose tool sources to list; From, on a resume
// that finishes a suspended step, is the run that suspended it (whose list
// the resume keeps).
type PinToolsInput struct {
	Run  RunInfo `json:"run"`
	From string  `json:"from,omitempty"`
}

// PinnedTools is a run's tool sources' list.
type PinnedTools struct {
	Tools []helix.SourceTool `json:"tools,omitempty"`
	// Unavailable are the sources that could not be listed, with why: the
	// run goes on without their tools.
	Unavailable map[string]string `json:"unavailable,omitempty"`
}

// PinTools returns the step that gives the run its tool list: the one
// recorded on its row, else (on a resume) the suspending run's, else the
// sources' lists now, recorded.
func (e *Env) PinTools(in PinToolsInput) dbos.Step[PinnedTools] {
	return func(ctx context.Context) (PinnedTools, error) {
		q := postgres.PgxQuerier(e.Store.Pool())
		own, previous, err := postgres.RunTools(ctx, q, in.Run.RunID, in.From)
		if err != nil {
			return PinnedTools{}, err
		}
		list := own
		if list == nil {
			list = previous
		}
		if list == nil {
			def, err := e.Agent(in.Run.AgentType)
			if err != nil {
				return PinnedTools{}, err
			}
			p := e.listSources(ctx, in.Run, def)
			if list, err = json.Marshal(p); err != nil {
				return PinnedTools{}, err
			}
		}
		if own == nil {
			if list, err = postgres.PinRunTools(ctx, q, in.Run.RunID, list); err != nil {
				return PinnedTools{}, err
			}
		}
		var p PinnedTools
		if err := json.Unmarshal(list, &p); err != nil {
			return PinnedTools{}, fmt.Errorf("decode the tool list of run %s: %w", in.Run.RunID, err)
		}
		return p, nil
	}
}

// listSources lists the tool sources of def, leaving out (as Unavailable)
// a source that fails or lists a tool whose name is not its own to give.
func (e *Env) listSources(ctx context.Context, run RunInfo, def *AgentDef) PinnedTools {
	var p PinnedTools
	taken := maps.Clone(def.Tools)
	for _, src := range def.Agent.ToolSources {
		name := src.SourceName()
		list, err := src.ListSourceTools(ctx)
		if err == nil {
			err = checkSourceTools(name, list, taken)
		}
		if err != nil {
			if p.Unavailable == nil {
				p.Unavailable = map[string]string{}
			}
			p.Unavailable[name] = err.Error()
			e.Log.Warn().Ctx(ctx).Str("event", "tools.source_unavailable").Str("sessionId", run.SessionID).Str("runId", run.RunID).
				Str("source", name).Err(err).Msg("the tool source could not be listed: this run goes on without its tools (the next run lists it again)")
			continue
		}
		for _, t := range list {
			taken[t.Name] = nil
		}
		p.Tools = append(p.Tools, list...)
	}
	return p
}

// checkSourceTools checks source's list: names valid, its own (prefixed
// by the source's name) and not taken by the agent's other tools.
func checkSourceTools(source string, list []helix.SourceTool, taken map[string]*helix.Tool) error {
	seen := map[string]bool{}
	for _, t := range list {
		switch {
		case helix.ValidateToolName(t.Name) != nil:
			return fmt.Errorf("tool %q: %w", t.Remote, helix.ValidateToolName(t.Name))
		case t.Source != source || !strings.HasPrefix(t.Name, source):
			return fmt.Errorf("tool %q (%q) does not belong to source %q", t.Remote, t.Name, source)
		case seen[t.Name]:
			return fmt.Errorf("two tools named %q", t.Name)
		}
		if _, ok := taken[t.Name]; ok {
			return fmt.Errorf("tool %q: the agent already has a tool named %q", t.Remote, t.Name)
		}
		seen[t.Name] = true
	}
	return nil
}

// WithSourceTools returns d with the pinned tools added (d itself when
// there are none), each calling its source.
func (d *AgentDef) WithSourceTools(p PinnedTools) (*AgentDef, error) {
	if len(p.Tools) == 0 {
		return d, nil
	}
	sources := map[string]helix.ToolSource{}
	for _, s := range d.Agent.ToolSources {
		sources[s.SourceName()] = s
	}
	nd := &AgentDef{Agent: d.Agent, Tools: maps.Clone(d.Tools), Specs: slices.Clone(d.Specs), Output: d.Output}
	for _, st := range p.Tools {
		src, ok := sources[st.Source]
		if !ok {
			return nil, fmt.Errorf("the run's tool list names source %q, which agent %q no longer has: give the agent that source again, or start a new session",
				st.Source, d.Agent.Name)
		}
		tool, err := st.Tool(src)
		if err != nil {
			return nil, err
		}
		nd.Tools[st.Name] = tool
		nd.Specs = append(nd.Specs, tool.Spec())
	}
	return nd, nil
}

// RunAgent returns the definition run's steps use: the agent's with the
// run's pinned tools (RunInfo.Def), else the registered one.
func (e *Env) RunAgent(run RunInfo) (*AgentDef, error) {
	if run.Def != nil {
		return run.Def, nil
	}
	return e.Agent(run.AgentType)
}

// interruptPoll is how often a running call of a tool that an interrupt
// cancels (helix.CancelOnInterrupt) looks at its session's interrupt flag.
const interruptPoll = 250 * time.Millisecond

// errCallInterrupted is the cause of a call's context cancelled by its
// session's interrupt.
var errCallInterrupted = errors.New("the session was interrupted")

// cancelOnInterrupt returns ctx, cancelled with errCallInterrupted once
// session sessionID's interrupt is requested (read, not taken: the run
// loop takes it after the step), and the function that stops watching.
func (e *Env) cancelOnInterrupt(ctx context.Context, sessionID string) (context.Context, func()) {
	cctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interruptPoll)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-cctx.Done():
				return
			case <-t.C:
			}
			requested, err := e.Store.InterruptRequested(cctx, sessionID)
			if err != nil {
				// The next tick looks again; the run loop sees the flag
				// after the step whatever happens here.
				e.Log.Debug().Ctx(ctx).Str("sessionId", sessionID).Err(err).Msg("tool.interrupt_watch")
				continue
			}
			if requested {
				cancel(errCallInterrupted)
				return
			}
		}
	})
	return cctx, func() {
		close(done)
		wg.Wait()
		cancel(nil)
	}
}
