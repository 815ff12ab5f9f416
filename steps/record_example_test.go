package steps_test

import (
	"fmt"

	"github.com/helix-agents/helix-dbos/steps"
)

// A record leaves out what its reader knows, and the reader puts it back:
// here a root session's stream, which is the session itself.
func ExampleLeaveOut() {
	session, stream := "s-1", "s-1"
	steps.LeaveOut(&stream, session)
	fmt.Printf("recorded: %q\n", stream)
	steps.PutBack(&stream, session)
	fmt.Printf("read back: %q\n", stream)
	// Output:
	// recorded: ""
	// read back: "s-1"
}
