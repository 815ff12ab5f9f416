package helix_test

import (
	"testing"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// TestMain drops the databases of the runnable examples (pgtest.ExampleURL)
// after the tests and checks that no goroutine leaked.
func TestMain(m *testing.M) { pgtest.Main(m) }
