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

// surveySQL reads the executors that neither stopped nor were taken over
// and are alive (their lease is fresh: ReadCluster's and the takeover
// sweep's notion), run on this machine ($1, a non-empty
// process.Namespace: their process may be gone, which the sweep takes over
// at once), or are this engine ($2), with the storage format level each
// recorded (migration 00027; NULL, an engine of a release before the
// levels, is 0). Executors of every application count: they share the
// stream and journal tables.
const surveySQL = `
SELECT executor_id, COALESCE(pid, 0), $1 <> '' AND pid_namespace IS NOT DISTINCT FROM $1 AND pid IS NOT NULL,
	heartbeat_at > now() - lease_ms * interval '1 millisecond', COALESCE(format_level, 0)
FROM helix.executors
WHERE stopped_at IS NULL AND taken_over_by IS NULL
  AND (heartbeat_at > now() - lease_ms * interval '1 millisecond' OR executor_id = $2 OR ($1 <> '' AND pid_namespace = $1))`

// formats keeps a launched engine's format gate at the cluster's format
// level: the lowest level the live executors read, its own included. It is
// refreshed by each takeover sweep (or, with the takeover disabled, a loop
// of the same interval), from the read that finds this machine's dead
// executors: no read per step. Until the first read the gate is at
// FormatLevelBase. A Client keeps its gate the same way, with no executor
// of its own (id empty): the level of the live executors, the newest when
// none is alive.
type formats struct {
	pool *pgxpool.Pool
	id   string
	ns   string // process.Namespace
	gate *postgres.FormatGate
	log  *zerolog.Logger
}

// survey reads the executors, sets the gate to the cluster's level, and
// returns the executors of this machine whose process is gone (taken over
// at once, not after their lease; they read nothing, so they hold the
// level back no more).
func (f *formats) survey(ctx context.Context) (dead []string, err error) {
	rows, err := f.pool.Query(ctx, surveySQL, f.ns, f.id)
	if err != nil {
		return nil, fmt.Errorf("read the live executors: %w", err)
	}
	defer rows.Close()
	dead = []string{}
	level := postgres.FormatLevelNewest
	var below []string
	for rows.Next() {
		var id string
		var pid, recorded int
		var here, fresh bool
		if err := rows.Scan(&id, &pid, &here, &fresh, &recorded); err != nil {
			return nil, err
		}
		switch {
		case f.id != "" && id == f.id:
		case here && !process.Alive(pid):
			dead = append(dead, id)
			continue
		case !fresh:
			continue
		}
		if l := postgres.FormatLevel(recorded); l < postgres.FormatLevelNewest {
			below = append(below, id)
			level = min(level, l)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
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

// recordFormatLevelSQL records the level this engine reads on its row, in
// the statement after a claim or a rejoin (migration 00027 clears it at
// both, so a process of an earlier release that takes the row over reads
// as level 0).
const recordFormatLevelSQL = `UPDATE helix.executors SET format_level = $4 WHERE executor_id = $1 AND hostname = $2 AND pid = $3`

// FormatLevel returns the storage format level this engine writes at: the
// lowest level a live executor of the cluster reads (its own included),
// FormatLevelBase until Launch read it. New formats (postgres.FormatLevel)
// start once the last engine of an older release is gone.
func (e *Engine) FormatLevel() FormatLevel { return FormatLevel(e.formats.Level()) }

// FormatLevel returns the storage format level the client writes at (an
// abort's chunks, a resume's): the lowest level a live executor reads,
// refreshed every TakeoverSweepInterval.
func (c *Client) FormatLevel() FormatLevel { return FormatLevel(c.c.store.FormatLevel()) }
