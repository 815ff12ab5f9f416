package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/workflows"
)

// lineWatch is a log writer that signals when a line containing want is
// written.
type lineWatch struct {
	want string
	once sync.Once
	seen chan struct{}
}

func (w *lineWatch) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// The step journal records only for the execution that owns the workflow:
// once another execution owns it (a takeover, a DBOS cancel or resume), the
// step that was running commits nothing: not its messages, not its records.
func TestJournalRecordsNothingOnceTheWorkflowIsAnotherExecutions(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	entered, release := make(chan struct{}), make(chan struct{})
	type in struct{}
	tool := helix.MustNewTool("slow", "waits", func(ctx context.Context, _ in, _ helix.ToolContext) (string, error) {
		close(entered)
		select {
		case <-release:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "done", nil
	})
	agent := &helix.Agent{Name: "journal-owner", Tools: []*helix.Tool{tool},
		Model: script(calls(call("t1", "slow", `{}`)), text("never reached"))}
	watch := &lineWatch{want: "run.taken_over", seen: make(chan struct{})}
	log := zerolog.New(watch)
	e, err := engine.New(t.Context(), engine.Config{DatabaseURL: url, Logger: &log})
	require.NoError(t, err)
	require.NoError(t, e.Register(agent))
	require.NoError(t, e.Launch(t.Context()))
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })

	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	<-entered // the model step is recorded; the tool runs

	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	defer pool.Close()
	tag, err := pool.Exec(t.Context(), `UPDATE dbos.workflow_status SET owner_xid = 'another-execution' WHERE workflow_uuid = $1`, h.WorkflowID)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	close(release)

	select {
	case <-watch.seen:
	case <-time.After(30 * time.Second):
		t.Fatal("the execution went on recording after its workflow became another execution's")
	}
	var names []string
	rows, err := pool.Query(t.Context(), `SELECT name FROM helix.step_journal
		WHERE workflow_id = $1 AND id >= $2 ORDER BY id`, h.WorkflowID, workflows.JournalBase)
	require.NoError(t, err)
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		names = append(names, n)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{steps.NameCallModel}, names, "the tool and the commit are not recorded")
	st, err := e.Session(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Zero(t, st.StepCount, "the step did not commit")
	msgs, err := e.Messages(t.Context(), h.SessionID, nil)
	require.NoError(t, err)
	require.Len(t, msgs.Messages, 1, "only the user's message")
}
