package steps

import (
	"fmt"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
)

// TestRequestSharesTheLog: a step's request is the cached log behind the
// system message, without a copy (the log's array is reused as it grows),
// capped so that nothing appended to a request reaches the log, and a
// commit over positions a request holds (a retry) copies instead of
// overwriting them.
func TestRequestSharesTheLog(t *testing.T) {
	t.Parallel()
	e := NewEnv(nil, zerolog.Nop())
	msgs := func(from, to int) []helix.Message {
		var out []helix.Message
		for i := from; i < to; i++ {
			out = append(out, helix.UserMessage(fmt.Sprint(i)))
		}
		return out
	}
	e.Remember("s", 2, msgs(0, 2))
	sys := helix.SystemMessage("be brief")
	req, err := e.request(t.Context(), "s", 2, &sys)
	require.NoError(t, err)
	require.Equal(t, append([]helix.Message{sys}, msgs(0, 2)...), req)
	require.Equal(t, len(req), cap(req), "capped: an append by the model copies")

	for n := 2; n < 200; n += 2 {
		e.Remember("s", n+2, msgs(n, n+2))
	}
	first, err := e.request(t.Context(), "s", 200, &sys)
	require.NoError(t, err)
	second, err := e.request(t.Context(), "s", 200, nil)
	require.NoError(t, err)
	require.Same(t, &first[1], &second[0], "the same memory, no copy")
	require.Equal(t, msgs(0, 200), second)

	// A retry rewrites positions 198 and 199: the requests handed out keep
	// what they read.
	e.Remember("s", 200, []helix.Message{helix.UserMessage("x"), helix.UserMessage("y")})
	require.Equal(t, "199", second[199].Content)
	again, err := e.request(t.Context(), "s", 200, nil)
	require.NoError(t, err)
	require.Equal(t, "y", again[199].Content)
	require.Equal(t, "0", again[0].Content)
}
