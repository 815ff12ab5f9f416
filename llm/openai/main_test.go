package openai_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test closes its fake server, which closes the client's idle
// connections: a goroutine left behind is a leak of the adapter (a body
// not closed, a retry timer not stopped).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
