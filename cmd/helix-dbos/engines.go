package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"go.opentelemetry.io/otel/trace"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/agentfile"
	"github.com/helix-agents/helix-dbos/migrations"
)

// loadAgentFile builds the agents of the configured agent file (--agents,
// HELIX_AGENTS, agents:), or returns nil when none is configured.
func (g *globals) loadAgentFile() (*agentfile.Agents, error) {
	if g.cfg.Agents == "" {
		return nil, nil
	}
	return agentfile.Load(g.cfg.Agents, nil)
}

// cliAgents are the agents resume, retry and abort register: those of the
// agent file, then the demo agent (unless the file defines its name).
type cliAgentSet struct {
	all  []*helix.Agent
	file *agentfile.Agents
	rec  *recorder
}

// known returns the agent types the set runs, sub-agents and companions
// included.
func (s *cliAgentSet) known() map[string]bool {
	out := map[string]bool{}
	var walk func(a *helix.Agent)
	walk = func(a *helix.Agent) {
		if out[a.Name] {
			return
		}
		out[a.Name] = true
		for _, sub := range append(a.SubAgents(), a.CompanionAgents()...) {
			walk(sub)
		}
	}
	for _, a := range s.all {
		walk(a)
	}
	return out
}

func (s *cliAgentSet) close() {
	s.rec.close()
	if s.file != nil {
		_ = s.file.Close() // the agents' MCP servers; nothing depends on how they stop
	}
}

// agentsFor returns the agents a command that continues a session of
// agentType registers, or an error saying how to define that agent. The
// demo agent records its executions (helix_demo.executions) only when it
// is the one that runs.
func (g *globals) agentsFor(ctx context.Context, url, sessionID, agentType string, delay time.Duration) (*cliAgentSet, error) {
	file, err := g.loadAgentFile()
	if err != nil {
		return nil, err
	}
	s := &cliAgentSet{file: file}
	if file != nil {
		s.all = append(s.all, file.All...)
	}
	if file == nil || !slices.Contains(file.Names(), researchAgentName) {
		o := researchOpts{delay: delay}
		if agentType == researchAgentName {
			if s.rec, err = newRecorder(ctx, url, true); err != nil {
				return nil, err
			}
			o.rec = s.rec
		}
		s.all = append(s.all, cliDemoAgents[researchAgentName](o))
	}
	if agentType != "" && !s.known()[agentType] {
		s.close()
		knows := slices.Sorted(maps.Keys(s.known()))
		how := "or give this command an agent file that defines it (--agents FILE, HELIX_AGENTS or agents: in the config file)"
		if file != nil {
			how = fmt.Sprintf("the agent file %s does not define it either", g.cfg.Agents)
		}
		return nil, fmt.Errorf("session %s belongs to agent %q, which this CLI does not define (it knows only %s): "+
			"the process that owns the agent must resume it (engine.Resume), because resuming runs the agent's model and tools; %s",
			sessionID, agentType, strings.Join(knows, ", "), how)
	}
	return s, nil
}

// cliEngine is an engine a command started.
type cliEngine struct {
	e  *engine.Engine
	id string
}

// engineOpts describe the engine a command starts.
type engineOpts struct {
	executorID string
	// lease is the engine's executor lease (0: engine.DefaultExecutorLease).
	lease time.Duration
	// hibernateAfter is the engine's Config.HibernateAfter (0: the
	// default).
	hibernateAfter time.Duration
	agents         *cliAgentSet
	skipMigrations bool
	// oneShot marks a command's short-lived engine: it takes no other
	// executor's sessions over (a live replica does that).
	oneShot bool
	// progress reports each stage; nil is silent.
	progress func(format string, args ...any)
	// beforeLaunch runs after the agents are registered, before Launch
	// (serve builds its HTTP server there: it registers its agents too).
	beforeLaunch func(e *engine.Engine) error
	// queue admits the engine's runs (nil: each at once).
	queue *engine.QueueConfig
	// retention runs the engine's retention job (nil: none).
	retention *engine.RetentionPolicy
	// tracerProvider receives the engine's spans (nil: the global one, a
	// no-op).
	tracerProvider trace.TracerProvider
}

// startEngine builds, prepares and launches an engine: migrations (unless
// skipped), agents, the executor claim, Launch (which leaves recorded runs
// of agents it lacks to a process that has them).
func (g *globals) startEngine(ctx context.Context, url string, o engineOpts) (_ *cliEngine, err error) {
	say := o.progress
	if say == nil {
		say = func(string, ...any) {}
	}
	if o.executorID == "" {
		o.executorID = engine.DefaultExecutorID()
	}
	say("starting an engine (executor %s)", o.executorID)
	if err := ping(ctx, url); err != nil {
		return nil, err
	}
	e, err := engine.New(ctx, engine.Config{DatabaseURL: url, ExecutorID: o.executorID, ExecutorLease: o.lease, SkipMigrations: true,
		Logger: g.logger(), DisableTakeover: o.oneShot, Queue: o.queue, TracerProvider: o.tracerProvider, Retention: o.retention,
		HibernateAfter: o.hibernateAfter})
	if err != nil {
		return nil, err
	}
	c := &cliEngine{e: e, id: e.ExecutorID()}
	defer func() {
		if err != nil {
			c.shutdown(ctx)
		}
	}()
	if !o.skipMigrations {
		// The engine skips its own migration (Config.SkipMigrations): the
		// command runs it here, to say which migrations it applied.
		pc, err := pgx.ParseConfig(url)
		if err != nil {
			return nil, errUnparsableURL
		}
		db := stdlib.OpenDB(*pc)
		applied, err := migrations.Up(ctx, db)
		_ = db.Close()
		if err != nil {
			return nil, fmt.Errorf("migrate %s: %w", describeDatabase(url), err)
		}
		for _, r := range applied {
			say("applied migration %s", r.Name)
		}
	}
	if o.agents != nil {
		if err := e.Register(o.agents.all...); err != nil {
			return nil, err
		}
	}
	if o.beforeLaunch != nil {
		if err := o.beforeLaunch(e); err != nil {
			return nil, err
		}
	}
	if err := e.Launch(ctx); err != nil {
		return nil, explain(err)
	}
	return c, nil
}

// ping says clearly when the database does not answer (DBOS's own error
// is long and names no setting).
func ping(ctx context.Context, url string) error {
	conn, err := connectDatabase(ctx, url)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// shutdown stops the engine: runs still going stop at their next step, and
// a live engine takes them over (the executor is marked stopped).
func (c *cliEngine) shutdown(ctx context.Context) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	_ = c.e.Shutdown(sctx)
}
