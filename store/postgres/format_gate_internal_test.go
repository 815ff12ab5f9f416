package postgres

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFormatGateCapsTheLevel: a store without a gate writes at the newest
// level, one with a gate at the gate's; a gate never reads below the
// baseline (the zero gate and a NULL level of a row just claimed are the
// baseline), and a gate set above this release's level holds this
// release's.
func TestFormatGateCapsTheLevel(t *testing.T) {
	t.Parallel()
	require.Equal(t, FormatLevelNewest, (&Store{shared: &shared{}}).FormatLevel(), "a store without a gate writes the newest formats")
	require.Equal(t, FormatLevelBaseline, (&FormatGate{}).Level(), "the zero gate is at the baseline")
	g := NewFormatGate(0)
	require.Equal(t, FormatLevelBaseline, (&Store{shared: &shared{opts: options{formats: g}}}).FormatLevel(), "no level is below the baseline")
	require.False(t, g.Set(FormatLevelNewest+1), "a level above this release's is capped at its own")
	require.Equal(t, FormatLevelNewest, g.Level())
	require.Equal(t, "1 (baseline)", FormatLevelBaseline.String())
	require.Equal(t, "2 (newer than this release)", (FormatLevelNewest + 1).String())
}
