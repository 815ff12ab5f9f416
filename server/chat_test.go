package server_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/aisdktest"
	"github.com/helix-agents/helix-dbos/server"
	"github.com/helix-agents/helix-dbos/server/aisdk"
)

// Shutdown ends the open chat streams of the AI SDK handler mounted as
// Config.Chat, as it ends SSE responses: at once, without the finish chunk
// (the run is not over), so that neither Shutdown nor net/http's waits for
// the run. The session is left alone: it completes, and the client
// reconnects on another instance with GET /chat/{id}/stream from the last
// sequence it has, losing nothing.
func TestShutdownEndsChatStreams(t *testing.T) {
	t.Parallel()
	gate, open := aisdktest.NewGate(t)
	agents := []*helix.Agent{aisdktest.GatedAgent(gate)}
	a := newHarnessWith(t, "", "exec-a", server.Config{Agents: agents}, aisdkChat(t, agents...))
	b := newHarnessWith(t, a.db, "exec-b", server.Config{Agents: agents}, aisdkChat(t, agents...))

	st := a.postChat("alice", "chat-sd", "go")
	seen := st.until("text-delta") // the run now waits behind the gate
	messageID := seen[0].chunk["messageId"].(string)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, a.srv.Shutdown(ctx), "the open chat stream does not hold Shutdown")
	rest := st.rest()
	require.NotContains(t, chatTypes(rest), "finish", "the stream did not end: no finish")
	require.NotContains(t, chatTypes(rest), "[DONE]")
	require.NoError(t, a.ts.Config.Shutdown(ctx), "nor net/http's Shutdown")
	select {
	case <-gate:
		t.Fatal("the run ended before the shutdowns returned")
	default:
	}

	open()
	b.waitStatus("alice", "chat-sd", "completed")
	seq := strconv.FormatInt(lastID(slices.Concat(seen, rest)), 10)
	more := b.openChat(http.MethodGet, "/chat/chat-sd/stream", "alice", nil,
		aisdk.HeaderResumeFromSequence, seq, aisdk.HeaderExistingMessageID, messageID).rest()
	require.Equal(t, messageID, more[0].chunk["messageId"])
	var text string
	for _, ev := range slices.Concat(seen, rest, more) {
		if ev.chunk["type"] == "text-delta" {
			text += ev.chunk["delta"].(string)
		}
	}
	require.Equal(t, "working done", text, "every delta once")
	types := chatTypes(more)
	require.Equal(t, []string{"finish", "[DONE]"}, types[len(types)-2:])
	require.Equal(t, "completed", more[len(more)-2].chunk["messageMetadata"].(map[string]any)["helix"].(map[string]any)["status"])
}

// Under a server without authentication (AllowUnauthenticated) the chat
// routes work too: every caller is "", as on the server's own routes,
// whether the handler takes the server's principal with
// aisdk.ServerPrincipal or with a hook of its own that returns
// server.PrincipalFromContext. Under an authenticating server the
// handler gets the authenticated principal, and a chat is its own.
func TestChatUnderServerAuthentication(t *testing.T) {
	t.Parallel()
	hookFromContext := func(agents ...*helix.Agent) func(*engine.Engine) http.Handler {
		return func(eng *engine.Engine) http.Handler {
			h, err := aisdk.NewHandler(eng, aisdk.Options{Agents: agents,
				Authenticate: func(r *http.Request) (string, error) {
					p, _ := server.PrincipalFromContext(r.Context())
					return string(p), nil
				}})
			require.NoError(t, err)
			return h
		}
	}
	serverPrincipal := func(agents ...*helix.Agent) func(*engine.Engine) http.Handler { return aisdkChat(t, agents...) }
	for name, chat := range map[string]func(...*helix.Agent) func(*engine.Engine) http.Handler{
		"ServerPrincipal":      serverPrincipal,
		"PrincipalFromContext": hookFromContext,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			agents := []*helix.Agent{echoAgent()}
			h := newHarnessWith(t, "", "", server.Config{Agents: agents, AllowUnauthenticated: true}, chat(agents...))
			evs := h.postChat("", "open-chat", "hi").rest()
			types := chatTypes(evs)
			require.Equal(t, []string{"finish", "[DONE]"}, types[len(types)-2:], "types: %v", types)
			sess, err := h.eng.Session(t.Context(), "open-chat")
			require.NoError(t, err)
			require.Empty(t, sess.UserID)
			require.Equal(t, "completed", h.status("", "open-chat").body["status"], "the server's routes see the chat's session")
		})
	}

	agents := []*helix.Agent{echoAgent()}
	h := newHarnessWith(t, "", "", server.Config{Agents: agents}, aisdkChat(t, agents...))
	h.postChat("alice", "alices-chat", "hi").rest()
	sess, err := h.eng.Session(t.Context(), "alices-chat")
	require.NoError(t, err)
	require.Equal(t, "alice", sess.UserID)
	res := h.do(http.MethodGet, "/chat/alices-chat/stream", "bob", nil)
	require.Equal(t, http.StatusNotFound, res.status, "body: %s", res.raw)
	require.Equal(t, http.StatusUnauthorized, h.do(http.MethodGet, "/chat/alices-chat/stream", "", nil).status)
}
