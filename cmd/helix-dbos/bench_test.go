package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBenchWaitingApproveViaRefusesUnknownRoute checks that an unknown
// --waiting-approve-via is refused, naming the two routes, before anything
// is written to the database.
func TestBenchWaitingApproveViaRefusesUnknownRoute(t *testing.T) {
	t.Parallel()
	_, err := runCLI(t, "bench", "--database-url", "postgres://helix@127.0.0.1:1/none", "--waiting", "3",
		"--waiting-approve-via", "replica", "--waiting-drain=false")
	require.ErrorContains(t, err, `the approvals' route (--waiting-approve-via) must be "client" or "engine", got "replica"`)
}
