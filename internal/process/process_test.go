package process_test

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/process"
)

func TestAlive(t *testing.T) {
	require.True(t, process.Alive(os.Getpid()))
	require.False(t, process.Alive(0))
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	require.False(t, process.Alive(cmd.Process.Pid), "an exited (and reaped) process is gone")
}
