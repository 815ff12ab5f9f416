package process_test

import (
	"os"
	"os/exec"
	"strings"
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

func TestNamespace(t *testing.T) {
	ns := process.Namespace()
	require.NotEmpty(t, ns, "Linux tells the boot and the pid namespace")
	out, err := exec.Command("sh", "-c", "cat /proc/sys/kernel/random/boot_id; readlink /proc/self/ns/pid").Output()
	require.NoError(t, err)
	lines := strings.Fields(string(out))
	require.Len(t, lines, 2)
	require.Equal(t, lines[0]+"/"+lines[1], ns, "a child process on this machine shares it")
}
