package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// cliBinary is the helix-dbos binary TestMain builds, for the tests that
// run the CLI as users do: a process of its own, its configuration from
// flags, the environment and files, its exit status.
var cliBinary string

// buildBinary builds the binary once. It goes next to the test binary,
// in go test's work directory (removed after the run), or in a temporary
// directory when the test binary lives elsewhere (go test -c).
func buildBinary() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	dir := filepath.Dir(exe)
	if !strings.HasPrefix(dir, os.TempDir()) {
		if dir, err = os.MkdirTemp("", "helix-dbos-cli-test"); err != nil {
			return err
		}
	}
	cliBinary = filepath.Join(dir, "helix-dbos")
	cmd := exec.Command("go", "build", "-o", cliBinary, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the helix-dbos binary: %w\n%s", err, out)
	}
	return nil
}

// binOpts configure one run of the binary.
type binOpts struct {
	dir   string   // working directory (default a fresh temporary one)
	env   []string // KEY=value added to an environment without HELIX_* variables
	stdin string
}

// binResult is what a run of the binary did.
type binResult struct {
	stdout, stderr string
	code           int
}

func (r binResult) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", r.code, r.stdout, r.stderr)
}

// cleanEnv is the test process's environment without the HELIX_*
// variables, so a developer's settings do not leak into the tests.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix) {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

func binCommand(ctx context.Context, t *testing.T, o binOpts, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(ctx, cliBinary, args...)
	cmd.Dir = o.dir
	if cmd.Dir == "" {
		cmd.Dir = t.TempDir()
	}
	cmd.Env = cleanEnv(o.env...)
	cmd.Stdin = strings.NewReader(o.stdin)
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// runBin runs the binary to its end.
func runBin(t *testing.T, o binOpts, args ...string) binResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := binCommand(ctx, t, o, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := binResult{stdout: stdout.String(), stderr: stderr.String()}
	if exit, ok := errors.AsType[*exec.ExitError](err); ok {
		r.code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v\n%s", args, err, r)
	}
	return r
}

// mustBin runs the binary and requires exit status 0.
func mustBin(t *testing.T, o binOpts, args ...string) string {
	t.Helper()
	r := runBin(t, o, args...)
	require.Equal(t, 0, r.code, "%v\n%s", args, r)
	return r.stdout
}

// bgProcess is a binary running in the background.
type bgProcess struct {
	cmd    *exec.Cmd
	stdout *watchBuffer
	stderr *watchBuffer
	done   chan struct{}
	err    error
}

// startBin starts the binary; the test kills it at cleanup if it still
// runs.
func startBin(t *testing.T, o binOpts, args ...string) *bgProcess {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := binCommand(ctx, t, o, args...)
	p := &bgProcess{cmd: cmd, stdout: newWatchBuffer(), stderr: newWatchBuffer(), done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	require.NoError(t, cmd.Start())
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

// wait waits (a minute at most) for the process to exit and returns its
// exit status.
func (p *bgProcess) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatalf("the process did not exit within a minute\n--- stdout\n%s--- stderr\n%s", p.stdout, p.stderr)
	}
	if exit, ok := errors.AsType[*exec.ExitError](p.err); ok {
		return exit.ExitCode()
	}
	require.NoError(t, p.err)
	return 0
}

// result waits (a minute at most) for the process to exit and returns
// what it did, as runBin does.
func (p *bgProcess) result(t *testing.T) binResult {
	t.Helper()
	code := p.wait(t)
	return binResult{stdout: p.stdout.String(), stderr: p.stderr.String(), code: code}
}

// waitFor waits until the process has printed want on stdout.
func (p *bgProcess) waitFor(t *testing.T, want string, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.stdout.seen(want):
	case <-p.done:
		if !strings.Contains(p.stdout.String(), want) {
			t.Fatalf("the process exited before printing %q\n--- stdout\n%s--- stderr\n%s", want, p.stdout, p.stderr)
		}
	case <-time.After(timeout):
		t.Fatalf("no %q after %s\n--- stdout\n%s--- stderr\n%s", want, timeout, p.stdout, p.stderr)
	}
}

// watchBuffer is a concurrency-safe buffer that signals when it contains a
// string.
type watchBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	waiters map[string]chan struct{}
}

func newWatchBuffer() *watchBuffer { return &watchBuffer{waiters: map[string]chan struct{}{}} }

func (w *watchBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	for s, ch := range w.waiters {
		if strings.Contains(w.b.String(), s) {
			close(ch)
			delete(w.waiters, s)
		}
	}
	return len(p), nil
}

func (w *watchBuffer) seen(s string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := make(chan struct{})
	if strings.Contains(w.b.String(), s) {
		close(ch)
		return ch
	}
	if old, ok := w.waiters[s]; ok {
		return old
	}
	w.waiters[s] = ch
	return ch
}

func (w *watchBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

var _ io.Writer = (*watchBuffer)(nil)
