package postgres

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFormatGateCapsTheLevel: a store without a gate writes at the newest
// level, one with a gate at the gate's, and a gate set above this release's
// level holds this release's.
func TestFormatGateCapsTheLevel(t *testing.T) {
	t.Parallel()
	require.Equal(t, FormatLevelNewest, (&Store{shared: &shared{}}).FormatLevel(), "a store without a gate writes the newest formats")
	g := NewFormatGate(FormatLevelBase)
	require.Equal(t, FormatLevelBase, (&Store{shared: &shared{opts: options{formats: g}}}).FormatLevel())
	require.True(t, g.Set(FormatLevelNewest+1), "a level above this release's is capped at its own")
	require.Equal(t, FormatLevelNewest, g.Level())
	require.False(t, g.Set(FormatLevelNewest))
}
