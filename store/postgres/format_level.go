package postgres

import (
	"fmt"
	"sync/atomic"
)

// FormatLevel numbers the storage formats a helix release reads, so that a
// replica writes a new format only once every live engine of the cluster
// reads it: through a rolling deploy, old and new releases run side by side,
// serve each other's streams and replay each other's workflows. Each
// engine records the level it reads in its helix.executors row
// (format_level; NULL, a row just claimed whose level is not written yet,
// is FormatLevelBaseline) and writes at the cluster's level: the lowest of
// the live executors' (engine.Engine.FormatLevel). Readers read every
// level this release knows.
//
// There is one level today, the baseline schema of the first release.
// docs/storage.md says how the next change of what a step writes that a
// release of today could not read adds level 2: a constant here with what
// it writes, FormatLevelNewest moved to it, and its writes gated on the
// level the run read once (workflows: the turn's level).
type FormatLevel int

const (
	// FormatLevelBaseline (1) is the storage layout of the baseline
	// migration (migrations/sql/00001_schema.sql): the keyed tables,
	// stream-chunk rows as marker rows, coded rows or bare chunks,
	// checkpoint journals in their compact encoding, model calls' records
	// as assistant message rows, the session's checkpoint pointer by ID.
	FormatLevelBaseline FormatLevel = 1
	// FormatLevelNewest is the newest level this release reads and writes:
	// the level its engines record.
	FormatLevelNewest = FormatLevelBaseline
)

// String names the level for logs and tools.
func (l FormatLevel) String() string {
	switch l {
	case FormatLevelBaseline:
		return "1 (baseline)"
	}
	if l > FormatLevelNewest {
		return fmt.Sprintf("%d (newer than this release)", int(l))
	}
	return fmt.Sprintf("%d (unknown)", int(l))
}

// FormatGate holds the format level a store writes at, the cluster's:
// an engine sets it from what its executor sweep reads (a few seconds
// apart); writers read it with one atomic load. A zero gate reads as
// FormatLevelBaseline, the safe level until the first read. Safe for
// concurrent use.
type FormatGate struct{ level atomic.Int32 }

// NewFormatGate returns a gate at level.
func NewFormatGate(level FormatLevel) *FormatGate {
	g := &FormatGate{}
	g.Set(level)
	return g
}

// Level returns the level to write at.
func (g *FormatGate) Level() FormatLevel {
	return max(FormatLevel(g.level.Load()), FormatLevelBaseline)
}

// Set sets the level to write at, capped at FormatLevelNewest (what this
// release writes), and reports whether it changed.
func (g *FormatGate) Set(level FormatLevel) (changed bool) {
	level = min(max(level, FormatLevelBaseline), FormatLevelNewest)
	return max(FormatLevel(g.level.Swap(int32(level))), FormatLevelBaseline) != level
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
