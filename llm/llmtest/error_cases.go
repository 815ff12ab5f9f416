package llmtest

import (
	"strings"
	"testing"

	helix "github.com/helix-agents/helix-dbos"
)

// ErrorCase is a provider response and the failure an adapter must turn it
// into: a row of an adapter's own error-classification table, for the
// error shapes and codes of its provider the conformance scenarios do not
// cover.
type ErrorCase struct {
	// Fixture is the response, repeated to every request.
	Fixture Fixture
	// Code and Recoverable are what the *helix.ModelError must say.
	Code        string
	Recoverable bool
	// Requests is how many requests the adapter must send: 1, or its
	// MaxRetries+1 for a recoverable failure.
	Requests int
	// Mention is a text the error message must contain: the provider's
	// explanation, a request ID, the advice.
	Mention string
}

// RunErrorCases runs each case as a parallel subtest: serve starts a
// server replaying the case's fixture and returns it with a model pointed
// at it, and the model is sent a user message. The call must fail as the
// case says.
func RunErrorCases(t *testing.T, serve func(t *testing.T, f Fixture) (helix.Model, *Server), cases map[string]ErrorCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, srv := serve(t, tc.Fixture)
			req := helix.ModelRequest{Messages: []helix.Message{helix.UserMessage("hi")}}
			_, err := m.GenerateStep(t.Context(), req, helix.StreamCallbacks{})
			me := AsModelError(t, err)
			if me.Code != tc.Code || me.Recoverable != tc.Recoverable {
				t.Errorf("code %q, recoverable %t; want %q, %t (error: %v)", me.Code, me.Recoverable, tc.Code, tc.Recoverable, err)
			}
			if n := len(srv.Requests()); n != tc.Requests {
				t.Errorf("%d requests, want %d", n, tc.Requests)
			}
			if !strings.Contains(me.Message, tc.Mention) {
				t.Errorf("message %q does not mention %q", me.Message, tc.Mention)
			}
		})
	}
}
