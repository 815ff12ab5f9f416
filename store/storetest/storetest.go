// Package storetest is the contract suite of package store: every
// implementation of store.SessionStore, store.StreamStore, store.StepStore,
// store.SuspensionStore, store.CompanionStore and store.CascadeStore must
// pass it.
//
//	func TestContract(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Store { return newStore(t) })
//	}
//
// The factory must return a store on fresh, isolated storage each time; the
// suite runs its cases in parallel. Beyond single-call behaviour the suite
// checks the concurrency guarantees the durable runtime relies on:
// exactly-one-wins session creation, compare-and-set, serialized custom-state
// merges, atomic commits that leave no trace on failure, the checkpoint
// pointer rule, readers that see every chunk exactly once in order,
// tool-call submissions that are recorded exactly once, one companion
// started of concurrent spawns of its name, and companion outcomes delivered
// exactly once.
//
// Import rule: helix, store, testify and the standard library.
package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// Store is what the suite exercises: every contract on one storage.
type Store interface {
	store.SessionStore
	store.StreamStore
	store.StepStore
	store.SuspensionStore
	store.CompanionStore
	store.CascadeStore
}

// Factory returns a store on fresh storage; cleanup is the factory's job
// (t.Cleanup).
type Factory func(t *testing.T) Store

// Run runs the whole contract suite.
func Run(t *testing.T, newStore Factory) {
	t.Helper()
	groups := []struct {
		name  string
		cases map[string]func(t *testing.T, s Store)
	}{
		{"Sessions", sessionCases},
		{"Messages", messageCases},
		{"Checkpoints", checkpointCases},
		{"Runs", runCases},
		{"SubSessions", subSessionCases},
		{"Staging", stagingCases},
		{"Streams", streamCases},
		{"Steps", stepCases},
		{"Suspensions", suspensionCases},
		{"Companions", companionCases},
		{"Cascade", cascadeCases},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for name, fn := range g.cases {
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					fn(t, newStore(t))
				})
			}
		})
	}
}

// newSession creates a root session with a unique ID for the test.
func newSession(t *testing.T, s Store, suffix string) *store.SessionState {
	t.Helper()
	st, err := s.CreateSession(t.Context(), store.CreateSessionParams{
		SessionID: fmt.Sprintf("sess-%s-%s", t.Name(), suffix),
		AgentType: "tester",
	})
	require.NoError(t, err)
	return st
}

func userMsgs(texts ...string) []helix.Message {
	out := make([]helix.Message, len(texts))
	for i, s := range texts {
		out[i] = helix.UserMessage(s)
	}
	return out
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

// jsonEq asserts two JSON documents are equal regardless of formatting.
func jsonEq(t *testing.T, want string, got json.RawMessage) {
	t.Helper()
	require.JSONEq(t, want, string(got))
}

// parallel runs fn n times concurrently and returns once all finished.
func parallel(n int, fn func(i int)) {
	done := make(chan struct{}, n)
	start := make(chan struct{})
	for i := range n {
		go func() {
			defer func() { done <- struct{}{} }()
			<-start
			fn(i)
		}()
	}
	close(start)
	for range n {
		<-done
	}
}

var ctxBackground = context.Background

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
