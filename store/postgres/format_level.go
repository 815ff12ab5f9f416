package postgres

import (
	"fmt"
	"sync/atomic"
)

// FormatLevel numbers the storage formats a helix release reads, so that a
// replica writes a new format only once every live engine of the cluster
// reads it: through a rolling deploy, old and new releases run side by side,
// serve each other's streams and replay each other's workflows. Each
// engine records the level it reads in its helix.executors row (migration
// 00027; NULL, in the rows of releases before the levels, is
// FormatLevelBase) and writes at the cluster's level: the lowest of the live
// executors' (engine.Engine.FormatLevel). Readers read every level always.
//
// The next change of what a step writes that a release of today could not
// read adds a level here (FormatLevel2, with what it writes), makes
// FormatLevelNewest that level, and gates the new writes on it.
type FormatLevel int

const (
	// FormatLevelBase is the formats of the releases before the levels:
	// stream-chunk rows of format 2 (a chunk alone as its JSON), a step's
	// commit's journal records in a helix.step_journal row, and a step's
	// start chunks written with its model call's record.
	FormatLevelBase FormatLevel = 0
	// FormatLevelCheckpointJournals (1) adds the writes a release of
	// FormatLevelBase cannot read: stream-chunk rows of format 3
	// (chunkpack_v3.go; its stream readers fail on them), a step's commit's
	// journal records in its checkpoint row (checkpoints.journal, migration
	// 00025; its replay would not find them and run the step's tools and
	// commit again), start chunks held for the step's commit (its replay
	// would not rebuild them), and the narrow row updates of migration
	// 00026 (a step points its session at its newest checkpoint with '' and
	// leaves the session's and the stream's updated_at alone; it reads
	// those columns as they are).
	FormatLevelCheckpointJournals FormatLevel = 1
	// FormatLevelModelMessages (2) adds the write a release of
	// FormatLevelCheckpointJournals cannot read: the record of a model call
	// written at once (a step whose tools run application code) as the
	// step's assistant message row in helix.messages, pending until the
	// step's commit counts it, with messages.meta (migration 00028), instead
	// of a helix.step_journal row. Its replay would not find the record
	// (and call the model again), its commit would fail on the pending row,
	// and its readers of messages would show the row before the commit.
	FormatLevelModelMessages FormatLevel = 2
	// FormatLevelDerivedChunks (3) adds stream-chunk rows of format 4
	// (chunkpack_v4.go): a step commit's chunk row leaves out what the
	// same transaction's checkpoint, messages and session rows hold, and
	// readers render those chunks back from the rows. A release before it
	// fails to read such a row (its readers know formats 2 and 3), and
	// its TruncateMessages would delete the rows a marker renders from.
	FormatLevelDerivedChunks FormatLevel = 3
	// FormatLevelKeyedTables (4) gives the sessions and streams created
	// at it an integer key (migration 00029): their messages, checkpoints
	// and chunk rows go to helix.messages_k, helix.checkpoints_k (compact
	// checkpoint IDs, rendered from their columns) and
	// helix.stream_chunks_k for their whole life, whatever the level at the
	// time of a later write. A release before it reads none of those
	// tables: it would find such a session without messages, checkpoints
	// or chunks, and its replays would not find the records the
	// checkpoints carry.
	FormatLevelKeyedTables FormatLevel = 4
	// FormatLevelCompactJournals (5) writes checkpoint journals (migration
	// 00025) compact (migration 00033): the engine's step names as small
	// integers (workflows' journalStepNames, helix.journal_step_name) and
	// a commit's record whose output is its message count alone as the
	// short entry [started, completed], rebuilt from the checkpoint's
	// message_count. A release before it reads such a name as a number
	// or fails on the short entry: its replay would not find the step's
	// records and run its tools and commit again.
	FormatLevelCompactJournals FormatLevel = 5
	// FormatLevelNewest is the newest level this release reads and writes:
	// the level its engines record.
	FormatLevelNewest = FormatLevelCompactJournals
)

// String names the level for logs and tools.
func (l FormatLevel) String() string {
	switch l {
	case FormatLevelBase:
		return "0 (base)"
	case FormatLevelCheckpointJournals:
		return "1 (checkpoint journals, chunk rows of format 3)"
	case FormatLevelModelMessages:
		return "2 (model records as assistant message rows)"
	case FormatLevelDerivedChunks:
		return "3 (derived chunk rows of format 4)"
	case FormatLevelKeyedTables:
		return "4 (keyed tables, compact checkpoint IDs)"
	case FormatLevelCompactJournals:
		return "5 (compact checkpoint journals)"
	}
	return fmt.Sprintf("%d (newer than this release)", int(l))
}

// FormatGate holds the format level a store writes at, the cluster's:
// an engine sets it from what its executor sweep reads (a few seconds
// apart); writers read it with one atomic load. The zero value is
// FormatLevelBase, the safe level until the first read. Safe for
// concurrent use.
type FormatGate struct{ level atomic.Int32 }

// NewFormatGate returns a gate at level.
func NewFormatGate(level FormatLevel) *FormatGate {
	g := &FormatGate{}
	g.Set(level)
	return g
}

// Level returns the level to write at.
func (g *FormatGate) Level() FormatLevel { return FormatLevel(g.level.Load()) }

// Set sets the level to write at, capped at FormatLevelNewest (what this
// release writes), and reports whether it changed.
func (g *FormatGate) Set(level FormatLevel) (changed bool) {
	level = min(max(level, FormatLevelBase), FormatLevelNewest)
	return FormatLevel(g.level.Swap(int32(level))) != level
}

// WithFormatGate makes the store write at gate's level (default: a store
// writes FormatLevelNewest, the formats of this release). An engine passes
// its own, which follows the cluster's live executors.
func WithFormatGate(gate *FormatGate) Option { return func(o *options) { o.formats = gate } }

// FormatLevel returns the level of the formats the store writes now: its
// gate's (WithFormatGate), FormatLevelNewest without one. Writers that
// choose a format read it once per write, so a level that changes between
// two writes changes only what the second writes; readers never use it.
func (s *Store) FormatLevel() FormatLevel {
	if g := s.shared.opts.formats; g != nil {
		return g.Level()
	}
	return FormatLevelNewest
}
