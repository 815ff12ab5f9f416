package bench

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// waitingWorkerEnv set to 1 makes the test binary a waiting-sessions
// worker instead of running tests: TestWaitingSmall's Worker runs it so.
const waitingWorkerEnv = "HELIX_BENCH_WAITING_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(waitingWorkerEnv) == "1" {
		if err := ServeWaitingWorker(context.Background(), os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	pgtest.Main(m)
}
