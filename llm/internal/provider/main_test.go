package provider_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Do waits on timers between attempts: a goroutine left behind is a timer
// or a context that was not released.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
