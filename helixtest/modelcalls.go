package helixtest

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
)

// ModelCalls counts a model's calls per agent step (the assistant messages
// of the request, plus one): a step counted twice is a model call made
// twice, which a recorded model call never is, whatever crashed. The zero
// value is ready; safe for concurrent use.
type ModelCalls struct {
	mu sync.Mutex
	n  map[int]int
}

// Wrap returns model counting its calls in m.
func (m *ModelCalls) Wrap(model helix.Model) helix.Model {
	return helix.ModelFunc(func(ctx context.Context, req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
		step := 1
		for _, msg := range req.Messages {
			if msg.Role == helix.RoleAssistant {
				step++
			}
		}
		m.mu.Lock()
		if m.n == nil {
			m.n = map[int]int{}
		}
		m.n[step]++
		m.mu.Unlock()
		return model.GenerateStep(ctx, req, cb)
	})
}

// Of returns how many times step's model call ran.
func (m *ModelCalls) Of(step int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[step]
}

// RequireOncePerStep fails t unless steps 1 to steps each called the model
// once, and no other step did.
func (m *ModelCalls) RequireOncePerStep(t testing.TB, steps int) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	want := map[int]int{}
	for s := 1; s <= steps; s++ {
		want[s] = 1
	}
	require.Equal(t, want, m.n, "model calls by step: a step's model call ran more than once, or a step is missing")
}
