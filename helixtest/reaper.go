package helixtest

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// envReaperContainer, in the environment of a copy of the test binary, makes
// that copy the container's watcher (see startReaper) instead of a test run.
const envReaperContainer = "HELIXTEST_REAPER_CONTAINER_ID"

// The watcher of the default server's container, when helixtest started one.
var (
	reaperMu   sync.Mutex
	reaperPipe *os.File // write end of the watcher's stdin, never written
	reaperCmd  *exec.Cmd
)

// init turns a copy of the test binary started by startReaper into the
// watcher, before any test or TestMain runs.
func init() {
	if id := os.Getenv(envReaperContainer); id != "" {
		os.Exit(reap(id))
	}
}

// startReaper makes sure the container is removed when this process exits
// without removing it (no Main, a panic, a timeout, a kill), where
// testcontainers' reaper does not: when Ryuk is disabled. It starts a copy of
// this binary whose stdin is a pipe only this process holds; the operating
// system closes the pipe when this process ends, however it ends, and the
// copy then removes the container. A Docker client is all it needs: no
// image, no docker CLI.
func startReaper(containerID string) error {
	if !testcontainers.ReadConfig().RyukDisabled {
		return nil // Ryuk removes the container once this process is gone
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("start the container watcher: find this executable: %w", err)
	}
	r, w, err := os.Pipe() // close-on-exec: no other child inherits w
	if err != nil {
		return fmt.Errorf("start the container watcher: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envReaperContainer+"="+containerID)
	cmd.Stdin = r
	// Stdout and stderr stay nil (the null device): a watcher that held the
	// test binary's output open would keep `go test` waiting for it.
	if err := cmd.Start(); err != nil {
		_ = r.Close()
		_ = w.Close()
		return fmt.Errorf("start the container watcher: %w", err)
	}
	_ = r.Close()
	reaperMu.Lock()
	reaperPipe, reaperCmd = w, cmd
	reaperMu.Unlock()
	return nil
}

// stopReaper lets the watcher go after Main removed the container itself: it
// finds the container gone and exits.
func stopReaper() {
	reaperMu.Lock()
	defer reaperMu.Unlock()
	if reaperPipe == nil {
		return
	}
	_ = reaperPipe.Close()
	_ = reaperCmd.Wait()
	reaperPipe, reaperCmd = nil, nil
}

// reap is the watcher: it waits for the end of its stdin (the test binary is
// gone, or Main is done), then removes the container. It ignores the signals
// a terminal sends to the whole process group (Ctrl-C), so that it outlives
// the test binary it cleans up after.
func reap(containerID string) int {
	signal.Ignore(os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return 1
	}
	defer cli.Close()
	if _, err := cli.ContainerRemove(ctx, containerID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
		return 1
	}
	return 0
}
