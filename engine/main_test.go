package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store"
)

func TestMain(m *testing.M) {
	if os.Getenv(stdioServerEnv) != "" {
		serveStdioMCP() // the test binary as an MCP server (mcp_test.go)
		return
	}
	pgtest.Main(m)
}

// newEngine returns a launched engine on a fresh database.
func newEngine(t *testing.T, agents ...*helix.Agent) *engine.Engine {
	t.Helper()
	return newEngineOn(t, pgtest.NewURL(t), agents...)
}

func newEngineOn(t *testing.T, url string, agents ...*helix.Agent) *engine.Engine {
	t.Helper()
	cfg := engine.Config{DatabaseURL: url}
	if queuedSuite() {
		// The whole suite through a queue: every run in segments.
		cfg.Queue = &engine.QueueConfig{PollingInterval: 20 * time.Millisecond}
	}
	return newEngineWith(t, cfg, agents...)
}

// newEngineWith returns an engine on cfg, its agents registered, launched
// and shut down at cleanup.
func newEngineWith(t *testing.T, cfg engine.Config, agents ...*helix.Agent) *engine.Engine {
	t.Helper()
	e, err := engine.New(t.Context(), cfg)
	require.NoError(t, err)
	require.NoError(t, e.Register(agents...))
	require.NoError(t, e.Launch(t.Context()))
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	return e
}

// newEngineLogging is newEngineOn without the queued suite, its logs
// written to log.
func newEngineLogging(t *testing.T, url string, log io.Writer, agents ...*helix.Agent) *engine.Engine {
	t.Helper()
	logger := zerolog.New(log)
	return newEngineWith(t, engine.Config{DatabaseURL: url, Logger: &logger}, agents...)
}

// script is a deterministic test model: the step to play is the number of
// assistant messages in the request, so it survives re-execution.
func script(steps ...func(req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error)) helix.Model {
	return helix.ModelFunc(func(ctx context.Context, req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
		n := 0
		for _, m := range req.Messages {
			if m.Role == helix.RoleAssistant {
				n++
			}
		}
		if n >= len(steps) {
			return helix.StepResult{}, fmt.Errorf("test script has %d steps, asked for step %d", len(steps), n)
		}
		return steps[n](req, cb)
	})
}

func text(s string) func(helix.ModelRequest, helix.StreamCallbacks) (helix.StepResult, error) {
	return func(_ helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
		for _, w := range []string{s[:len(s)/2], s[len(s)/2:]} {
			cb.TextDelta(w)
		}
		return helix.StepResult{Type: helix.StepText, Content: s, StopReason: helix.StopEndTurn, Usage: helix.Usage{InputTokens: 10, OutputTokens: 5}}, nil
	}
}

func calls(cs ...helix.ToolCall) func(helix.ModelRequest, helix.StreamCallbacks) (helix.StepResult, error) {
	return func(helix.ModelRequest, helix.StreamCallbacks) (helix.StepResult, error) {
		return helix.StepResult{Type: helix.StepToolCalls, ToolCalls: cs, StopReason: helix.StopToolUse}, nil
	}
}

func call(id, name, args string) helix.ToolCall {
	return helix.ToolCall{ID: id, Name: name, Arguments: json.RawMessage(args)}
}

func result(t *testing.T, h *engine.Handle) helix.AgentResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := h.Result(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		dumpGoroutines(t)
	}
	require.NoError(t, err)
	return res
}

// dumpGoroutines logs the stacks of the goroutines running workflow or
// step code, for a test that timed out waiting for a run.
func dumpGoroutines(t *testing.T) {
	t.Helper()
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	var keep []string
	for g := range strings.SplitSeq(b.String(), "\n\n") {
		if strings.Contains(g, "helix-dbos/workflows") || strings.Contains(g, "helix-dbos/steps") {
			keep = append(keep, g)
		}
	}
	t.Logf("goroutines in workflow or step code (of every test of the package):\n%s", strings.Join(keep, "\n\n"))
}

// chunks returns the run's chunk types as streamed.
func chunkTypes(t *testing.T, h *engine.Handle) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var types []string
	for c, err := range h.Stream(ctx) {
		require.NoError(t, err)
		if queuedSuite() && c.Chunk.ChunkType() == helix.ChunkRunQueued {
			continue // every run of the queued suite says so first
		}
		types = append(types, string(c.Chunk.ChunkType()))
	}
	return types
}

// queuedSuite reports a run of the suite with HELIX_TEST_QUEUED=1: every
// engine of newEngineOn admits its runs through a queue.
func queuedSuite() bool { return os.Getenv("HELIX_TEST_QUEUED") == "1" }

func allMessages(t *testing.T, e *engine.Engine, sessionID string) []helix.Message {
	t.Helper()
	page, err := e.Messages(t.Context(), sessionID, &store.GetMessagesOptions{Limit: store.MaxPageSize})
	require.NoError(t, err)
	return page.Messages
}

type notes struct {
	Notes []string `json:"notes"`
}

// noteTool appends its text to the custom state's notes and counts its
// executions by idempotency key.
type executions struct {
	mu   sync.Mutex
	keys map[string]int
}

func (x *executions) record(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.keys == nil {
		x.keys = map[string]int{}
	}
	x.keys[key]++
}

func noteTool(x *executions) *helix.Tool {
	type in struct {
		Text string `json:"text"`
	}
	return helix.MustNewTool("note", "Record a note", func(ctx context.Context, i in, tc helix.ToolContext) (map[string]string, error) {
		x.record(tc.IdempotencyKey())
		err := helix.UpdateState(tc, func(s *notes) error { s.Notes = append(s.Notes, i.Text); return nil })
		return map[string]string{"saved": i.Text}, err
	})
}
