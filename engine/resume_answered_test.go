package engine_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// Resume after SubmitToolResult returns a handle on the answered run even
// when the answer carried it to its end before the Resume came (an
// approval given to a live wait, and to a hibernated one, whose wake
// starts the continuation at once): the handle's result is its outcome,
// and nothing starts. A message cannot be added to the ended session.
func TestResumeAfterTheAnsweredRunEnded(t *testing.T) {
	t.Parallel()
	for name, hibernateAfter := range map[string]time.Duration{"live": -1, "hibernated": 50 * time.Millisecond} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var runs sync.Map
			agent := &helix.Agent{Name: "payer-" + name, Tools: []*helix.Tool{transferTool(&runs, helix.RequireApproval())},
				Model: script(calls(call("t1", "transfer", `{"to":"bob","amount":5}`)), text("paid"))}
			e := newEngineWith(t, engine.Config{DatabaseURL: pgtest.NewURL(t), HibernateAfter: hibernateAfter}, agent)
			h, err := e.Execute(t.Context(), agent, engine.Input{Message: "pay bob"}, nil)
			require.NoError(t, err)
			require.Equal(t, helix.AgentSuspendedClientTool, awaitSuspended(t, h).Status)
			if hibernateAfter > 0 {
				require.EventuallyWithT(t, func(c *assert.CollectT) {
					run, err := e.CurrentRun(t.Context(), h.SessionID)
					if assert.NoError(c, err) {
						assert.NotNil(c, run.HibernatedAt, "the run hibernated")
					}
				}, 10*time.Second, 10*time.Millisecond)
			}
			submit(t, e, h.SessionID, helix.Approve("t1", "fine"))
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				st, err := e.Session(t.Context(), h.SessionID)
				if assert.NoError(c, err) {
					assert.Equal(c, helix.SessionCompleted, st.Status, "the answer carried the run to its end")
				}
			}, 10*time.Second, 5*time.Millisecond)

			h2, err := e.Resume(t.Context(), h.SessionID, nil)
			require.NoError(t, err, "the answered run ended: Resume returns it")
			require.Equal(t, h.RunID, h2.RunID)
			res := result(t, h2)
			require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
			all, err := e.Runs(t.Context(), h.SessionID)
			require.NoError(t, err)
			require.Len(t, all, 1, "Resume started nothing")

			_, err = e.Resume(t.Context(), h.SessionID, &engine.ResumeOptions{Message: "and again"})
			var notResumable *helix.AgentNotResumableError
			require.True(t, errors.As(err, &notResumable), "%v", err)
		})
	}
}
