package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/helix-agents/helix-dbos/internal/process"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// formats keeps a launched engine's format gate at the cluster's format
// level: the lowest level the live executors read, its own included. It is
// refreshed by each takeover sweep (or, with the takeover disabled, a loop
// of the same interval), from the read that finds this machine's dead
// executors: no read per step. Until the first read the gate is at
// FormatLevelBaseline. A Client keeps its gate the same way, with no executor
// of its own (id empty): the level of the live executors, the newest when
// none is alive.
type formats struct {
	pool *pgxpool.Pool
	id   string
	ns   string // process.Namespace
	gate *postgres.FormatGate
	log  *zerolog.Logger
}

// survey reads the executors (postgres.SurveyExecutors: those in service
// that are alive, on this machine, or this engine), sets the gate to the cluster's level, and
// returns the executors of this machine whose process is gone (taken over
// at once, not after their lease; they read nothing, so they hold the
// level back no more).
func (f *formats) survey(ctx context.Context) (dead []string, err error) {
	executors, err := postgres.SurveyExecutors(ctx, postgres.PgxQuerier(f.pool), f.ns, f.id)
	if err != nil {
		return nil, fmt.Errorf("read the live executors: %w", err)
	}
	dead = []string{}
	level := postgres.FormatLevelNewest
	var below []string
	for _, x := range executors {
		switch {
		case f.id != "" && x.ExecutorID == f.id:
		case x.Here && !process.Alive(x.PID):
			dead = append(dead, x.ExecutorID)
			continue
		case !x.Fresh:
			continue
		}
		if l := x.FormatLevel; l < postgres.FormatLevelNewest {
			below = append(below, x.ExecutorID)
			level = min(level, l)
		}
	}
	prev := f.gate.Level()
	if f.gate.Set(level) {
		slices.Sort(below)
		f.log.Info().Str("event", "executor.format_level").Str("executorId", f.id).Int("level", int(level)).
			Int("previous", int(prev)).Strs("olderExecutors", below).
			Msgf("this process writes the storage formats of level %s: the lowest level a live executor reads "+
				"(level %d once every live executor reads it: finish the rolling deploy)", level, postgres.FormatLevelNewest)
	}
	return dead, nil
}

// FormatLevel returns the storage format level this engine writes at: the
// lowest level a live executor of the cluster reads (its own included),
// FormatLevelBaseline until Launch read it. New formats (postgres.FormatLevel)
// start once the last engine of an older release is gone.
func (e *Engine) FormatLevel() FormatLevel { return FormatLevel(e.formats.Level()) }

// FormatLevel returns the storage format level the client writes at (an
// abort's chunks, a resume's): the lowest level a live executor reads,
// refreshed every TakeoverSweepInterval.
func (c *Client) FormatLevel() FormatLevel { return FormatLevel(c.c.store.FormatLevel()) }
