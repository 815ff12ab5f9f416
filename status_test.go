package helix_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
)

func TestStatusConversions(t *testing.T) {
	t.Parallel()
	// core-api.md: storage → runtime and back.
	require.Equal(t, helix.AgentRunning, helix.SessionStatusToAgentStatus(helix.SessionActive))
	require.Equal(t, helix.SessionActive, helix.AgentStatusToSessionStatus(helix.AgentRunning))
	require.Equal(t, helix.SessionActive, helix.AgentStatusToSessionStatus(helix.AgentWaitingTool))
	for _, s := range []helix.AgentStatus{helix.AgentSuspendedClientTool, helix.AgentSuspendedAwaitingChildren, helix.AgentSuspendedStepPartial} {
		require.Equal(t, helix.SessionActive, helix.AgentStatusToSessionStatus(s), "a suspended session stays active")
		require.True(t, s.Suspended())
	}
	for _, s := range []helix.SessionStatus{helix.SessionCompleted, helix.SessionFailed, helix.SessionInterrupted, helix.SessionPaused} {
		require.Equal(t, string(s), string(helix.SessionStatusToAgentStatus(s)))
		require.Equal(t, s, helix.AgentStatusToSessionStatus(helix.SessionStatusToAgentStatus(s)), "round trip")
	}
	for _, s := range []helix.RunStatus{helix.RunRunning, helix.RunCompleted, helix.RunFailed, helix.RunInterrupted,
		helix.RunSuspendedClientTool, helix.RunSuspendedAwaitingChildren, helix.RunSuspendedStepPartial} {
		require.True(t, s.Valid())
		a := helix.RunStatusToAgentStatus(s)
		require.True(t, a.Valid())
		require.Equal(t, s.Suspended(), a.Suspended())
	}
	require.True(t, helix.RunCompleted.Final())
	require.False(t, helix.RunSuspendedClientTool.Final())
	require.True(t, helix.SessionCompleted.Terminal())
	require.False(t, helix.SessionInterrupted.Terminal())
}

func TestStatusValidity(t *testing.T) {
	t.Parallel()
	_, err := helix.ParseSessionStatus("running")
	require.ErrorContains(t, err, "want active")
	s, err := helix.ParseSessionStatus("paused")
	require.NoError(t, err)
	require.Equal(t, helix.SessionPaused, s)
	r, err := helix.ParseRunStatus("suspended_step_partial")
	require.NoError(t, err)
	require.Equal(t, helix.RunSuspendedStepPartial, r)
	_, err = helix.ParseRunStatus("waiting")
	require.Error(t, err)
	require.True(t, helix.SubSessionCompleted.Valid())
	require.False(t, helix.SubSessionStatus("done").Valid())
	require.True(t, helix.SubSessionPersistent.Valid())
	require.True(t, helix.SessionModePersistent.Valid())
	require.False(t, helix.SessionMode("ephemeral").Valid())
	require.True(t, helix.StreamEnded.Valid())
	require.False(t, helix.StreamStatus("completed").Valid(), `streams end with "ended", not "completed"`)
}
