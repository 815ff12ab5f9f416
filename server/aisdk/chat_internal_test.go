package aisdk

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

// The next turn of a chat passes the caller's principal to the engine
// (ExecuteOptions.UserID), whose check in the transaction that continues
// the session cannot be raced: when the session is another principal's by
// then, the turn is refused as session_not_found and nothing is written.
// (The handler's own check comes first; here it is bypassed with a
// session state read before the owner changed, as a racing request
// would hold.)
func TestNextTurnOwnerCheckedByEngine(t *testing.T) {
	t.Parallel()
	eng, err := engine.New(t.Context(), engine.Config{DatabaseURL: pgtest.NewURL(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Shutdown(context.Background())) })
	agent := &helix.Agent{Name: "echo", Model: scripted.New(scripted.Step{Text: "one"}, scripted.Step{Text: "two"})}
	h, err := NewHandler(eng, Options{Agents: []*helix.Agent{agent}, Authenticate: func(*http.Request) (string, error) { return "bob", nil }})
	require.NoError(t, err)
	require.NoError(t, eng.Launch(t.Context()))

	hd, err := eng.Execute(t.Context(), agent, engine.Input{Message: "hi"}, &engine.ExecuteOptions{SessionID: "alices", UserID: "alice"})
	require.NoError(t, err)
	_, err = hd.Await(t.Context())
	require.NoError(t, err)
	st, err := eng.Session(t.Context(), "alices")
	require.NoError(t, err)
	stale := *st
	stale.UserID = "bob" // what bob's request read before alice took the ID

	req := &ChatRequest{ID: "alices", Messages: []UIMessage{{ID: "u2", Role: "user", Parts: []UIPart{{Type: "text", Text: "mine"}}}}}
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/chat", nil)
	e := h.nextTurn(httptest.NewRecorder(), r, &stale, agent, req, "bob")
	require.NotNil(t, e)
	require.Equal(t, http.StatusNotFound, e.Status)
	require.Equal(t, CodeSessionNotFound, e.Code)

	runs, err := eng.Runs(t.Context(), "alices")
	require.NoError(t, err)
	require.Len(t, runs, 1, "no turn was started")
	msgs, err := eng.Messages(t.Context(), "alices", nil)
	require.NoError(t, err)
	require.Len(t, msgs.Messages, 2, "bob's message was not added")

	// The owner's own turn goes through.
	rec := httptest.NewRecorder()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.Nil(t, h.nextTurn(rec, r.WithContext(ctx), st, agent, req, "alice"))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), `"finishReason":"stop"`)
}
