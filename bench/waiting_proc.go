package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// workerProc is a running worker process, seen from the parent: requests
// go to its stdin, answers and events come from its stdout, its stderr is
// kept for the errors that need it. Several goroutines may call it at
// once: each request carries an ID, and its answer, which may come in any
// order, is matched by it.
type workerProc struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stdinM  sync.Mutex // one request line at a time
	lastID  atomic.Int64
	mu      sync.Mutex
	pending map[int64]chan workerLine // by request ID, until answered
	gone    chan struct{}             // closed when its stdout ends
	stderr  *tailBuffer
	waited  bool
}

// startWorker starts cmd as a worker. Its events go to onEvent, from the
// goroutine that reads its stdout (onEvent must not block).
func startWorker(cmd *exec.Cmd, onEvent func(workerLine)) (*workerProc, error) {
	w := &workerProc{cmd: cmd, pending: map[int64]chan workerLine{}, gone: make(chan struct{}), stderr: &tailBuffer{max: 16 << 10}}
	cmd.Stderr = w.stderr
	var err error
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("bench: worker stdin: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: worker stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start the worker %s: %w", cmd.Path, err)
	}
	go func() {
		defer close(w.gone)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var l workerLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				fmt.Fprintf(w.stderr, "bench: undecodable worker line %q\n", sc.Text())
				continue
			}
			if l.Event != "" {
				onEvent(l)
				continue
			}
			w.mu.Lock()
			ch, ok := w.pending[l.ID]
			delete(w.pending, l.ID)
			w.mu.Unlock()
			if ok {
				ch <- l // buffered: never blocks
			} // else its caller gave up waiting
		}
	}()
	return w, nil
}

// call sends req and returns its answer, waiting at most timeout.
func (w *workerProc) call(ctx context.Context, req workerRequest, timeout time.Duration) (workerLine, error) {
	req.ID = w.lastID.Add(1)
	b, err := json.Marshal(req)
	if err != nil {
		return workerLine{}, err
	}
	answer := make(chan workerLine, 1)
	w.mu.Lock()
	w.pending[req.ID] = answer
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.pending, req.ID)
		w.mu.Unlock()
	}()
	w.stdinM.Lock()
	_, err = w.stdin.Write(append(b, '\n'))
	w.stdinM.Unlock()
	if err != nil {
		return workerLine{}, fmt.Errorf("bench: send %q to worker %d: %w%s", req.Op, w.cmd.Process.Pid, err, w.stderrTail())
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	answered := func(l workerLine) (workerLine, error) {
		if l.Error != "" {
			return l, fmt.Errorf("bench: worker %d: %s: %s", w.cmd.Process.Pid, req.Op, l.Error)
		}
		return l, nil
	}
	select {
	case l := <-answer:
		return answered(l)
	case <-w.gone:
		select {
		case l := <-answer: // answered, then exited (a stop)
			return answered(l)
		default:
		}
		return workerLine{}, fmt.Errorf("bench: worker %d exited before it answered %q%s", w.cmd.Process.Pid, req.Op, w.stderrTail())
	case <-t.C:
		return workerLine{}, fmt.Errorf("bench: worker %d did not answer %q within %s: it is stuck or the machine is overloaded%s",
			w.cmd.Process.Pid, req.Op, timeout, w.stderrTail())
	case <-ctx.Done():
		return workerLine{}, ctx.Err()
	}
}

// stderrTail is the end of the worker's stderr, for an error message.
func (w *workerProc) stderrTail() string {
	if s := strings.TrimSpace(w.stderr.String()); s != "" {
		return "; its stderr ends:\n" + s
	}
	return ""
}

// rss returns the worker's resident set size, in bytes, from
// /proc/<pid>/status (VmRSS).
func (w *workerProc) rss() (int64, error) {
	path := "/proc/" + strconv.Itoa(w.cmd.Process.Pid) + "/status"
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("bench: read the worker's resident set size: %w (the waiting-sessions mode needs Linux's /proc)", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("bench: parse %s's VmRSS %q: %w", path, v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("bench: no VmRSS in %s", path)
}

// kill ends the worker with SIGKILL, as a crash would, and reaps it (so
// its executor ID's next holder sees it dead).
func (w *workerProc) kill() error {
	if w.waited {
		return nil
	}
	if err := w.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("bench: kill worker %d: %w", w.cmd.Process.Pid, err)
	}
	<-w.gone // Wait closes stdout: first read it to its end
	w.waited = true
	_ = w.cmd.Wait() // "signal: killed"
	return nil
}

// stop asks the worker to shut its engine down and waits for it to exit,
// killing it after timeout.
func (w *workerProc) stop(ctx context.Context, timeout time.Duration) error {
	if _, err := w.call(ctx, workerRequest{Op: opStop}, timeout); err != nil {
		_ = w.kill()
		return err
	}
	_ = w.stdin.Close()
	select {
	case <-w.gone:
	case <-time.After(timeout):
		_ = w.kill()
		return fmt.Errorf("bench: worker %d did not exit within %s of its engine's shutdown%s", w.cmd.Process.Pid, timeout, w.stderrTail())
	}
	w.waited = true
	if err := w.cmd.Wait(); err != nil {
		return fmt.Errorf("bench: worker %d: %w%s", w.cmd.Process.Pid, err, w.stderrTail())
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	mu  sync.Mutex
	b   bytes.Buffer
}

// Write keeps p, dropping the oldest bytes beyond max.
func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if over := t.b.Len() - t.max; over > 0 {
		t.b.Next(over)
	}
	return len(p), nil
}

// String returns what is kept.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()
}

// wakeLog collects the workers' tool and step-2 stamps, by session.
type wakeLog struct {
	mu      sync.Mutex
	tool    map[string][]int64
	step    map[string][]int64
	changed chan struct{} // closed and replaced at every stamp
}

func newWakeLog() *wakeLog {
	return &wakeLog{tool: map[string][]int64{}, step: map[string][]int64{}, changed: make(chan struct{})}
}

// record takes a worker event.
func (l *wakeLog) record(e workerLine) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch e.Event {
	case eventTool:
		l.tool[e.Session] = append(l.tool[e.Session], e.At)
	case eventStep:
		l.step[e.Session] = append(l.step[e.Session], e.At)
	default:
		return
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// await returns the first tool and step-2 stamps of session, waiting at
// most timeout for the latter.
func (l *wakeLog) await(ctx context.Context, session string, timeout time.Duration) (tool, step int64, err error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		l.mu.Lock()
		tools, steps, changed := l.tool[session], l.step[session], l.changed
		l.mu.Unlock()
		if len(steps) > 0 {
			if len(tools) == 0 {
				return 0, 0, fmt.Errorf("bench: session %s: the model was called for step 2 before the approved tool ran", session)
			}
			return tools[0], steps[0], nil
		}
		select {
		case <-changed:
		case <-t.C:
			return 0, 0, fmt.Errorf("bench: session %s: the model was not called for step 2 within %s of its approval (lost wake-up?)", session, timeout)
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
}

// counts returns how many sessions woke once (one tool stamp and one
// step-2 stamp), and the tool and step-2 stamps of all sessions.
func (l *wakeLog) counts() (once, tools, steps int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s, st := range l.step {
		if len(st) == 1 && len(l.tool[s]) == 1 {
			once++
		}
		steps += len(st)
	}
	for _, t := range l.tool {
		tools += len(t)
	}
	return once, tools, steps
}
