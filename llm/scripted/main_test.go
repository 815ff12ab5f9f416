package scripted_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The package starts no goroutine of its own; a paced step that outlives
// its call would show up here.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
