package integration_test

// ExecuteTx's promise across processes: a run committed in an application's
// transaction starts on a live engine even when the process that committed
// it dies right after the commit.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// Environment of the ExecuteTx child: the database URL; its presence makes
// the re-executed test binary the child.
const execTxEnvURL = "HELIX_EXECTX_CHILD_URL"

const (
	execTxAgentName = "exectx-agent"
	execTxSession   = "exectx-ticket-1"
	// execTxCommitted is the line the child prints once its transaction
	// committed; it then waits to be killed.
	execTxCommitted = "committed"
)

// execTxAgent is the agent of both processes: the child (a web handler
// with a Client) names it, the parent's engine runs it.
func execTxAgent() *helix.Agent {
	return &helix.Agent{Name: execTxAgentName, Model: helix.ModelFunc(
		func(ctx context.Context, req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
			return helix.StepResult{Type: helix.StepText, Content: "ticket triaged", StopReason: helix.StopEndTurn}, nil
		})}
}

func init() {
	url := os.Getenv(execTxEnvURL)
	if url == "" {
		return
	}
	go func() { // the parent holds stdin open; exit if it dies first
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	if err := runExecTxChild(context.Background(), url); err != nil {
		fmt.Fprintf(os.Stderr, "exectx child: %v\n", err)
		os.Exit(1)
	}
	select {} // committed: wait for SIGKILL
}

// runExecTxChild creates a ticket and its agent session in one
// transaction, commits, and says so.
func runExecTxChild(ctx context.Context, url string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	c, err := engine.NewClient(ctx, engine.ClientConfig{Pool: pool})
	if err != nil {
		return err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO tickets (id, session_id) VALUES ('t-1', $1)`, execTxSession); err != nil {
		return err
	}
	p, err := c.ExecuteTx(ctx, tx, execTxAgent(), engine.Input{Message: "the printer is on fire"}, &engine.ExecuteOptions{SessionID: execTxSession})
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	fmt.Println(execTxCommitted, p.RunID)
	return nil
}

func TestExecuteTxRunSurvivesTheCommittingProcess(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURLOn(t, serverURL(t))
	// A live engine that registers the agent, with a sweep far longer than
	// the test: the run must start from the commit's announcement.
	e, err := engine.New(t.Context(), engine.Config{DatabaseURL: url, RecordedRunSweepInterval: time.Hour})
	require.NoError(t, err)
	agent := execTxAgent()
	require.NoError(t, e.Register(agent))
	require.NoError(t, e.Launch(t.Context()))
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(t.Context(), `CREATE TABLE tickets (id text PRIMARY KEY, session_id text NOT NULL)`)
	require.NoError(t, err)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), execTxEnvURL+"="+url)
	_, err = cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == execTxCommitted {
				lines <- f[1]
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	var runID string
	select {
	case runID = <-lines:
	case err := <-exited:
		t.Fatalf("the child exited before committing: %v\n%s", err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the child did not commit in 30 s:\n%s", stderr.String())
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the killed child did not exit")
	}
	require.True(t, cmd.ProcessState.Sys().(syscall.WaitStatus).Signaled(), "the child died of SIGKILL")

	h, err := e.Run(t.Context(), execTxSession, runID)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, res.Status)
	require.JSONEq(t, `"ticket triaged"`, string(res.Output))
	var ticket string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT session_id FROM tickets WHERE id = 't-1'`).Scan(&ticket))
	require.Equal(t, execTxSession, ticket)
}
