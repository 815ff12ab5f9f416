package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// A cluster's first deploy: replicas start at the same instant on an empty
// database. DBOS's own system-schema migrations take no lock (two creators
// of schema dbos collide on a unique index); every replica must come up
// anyway, and then run sessions.
func TestReplicasStartTogetherOnAnEmptyDatabase(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyURL(t)
	agent := &helix.Agent{Name: "hello", Model: script(text("hi"))}
	const replicas = 6
	engines := make([]*engine.Engine, replicas)
	errs := make([]error, replicas)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			<-start
			e, err := engine.New(t.Context(), engine.Config{DatabaseURL: url, ExecutorID: fmt.Sprintf("replica-%d", i)})
			if err == nil {
				engines[i] = e
				if err = e.Register(agent); err == nil {
					err = e.Launch(t.Context())
				}
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	for i, e := range engines {
		if e != nil {
			t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
		}
		require.NoError(t, errs[i], "replica %d", i)
	}
	for i, e := range engines {
		h, err := e.Execute(t.Context(), agent, engine.Input{Message: "hello"}, nil)
		require.NoError(t, err, "replica %d", i)
		require.Equal(t, helix.AgentCompleted, result(t, h).Status, "replica %d", i)
	}
}
