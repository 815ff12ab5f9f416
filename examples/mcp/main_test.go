package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/helixtest"
	"github.com/helix-agents/helix-dbos/mcp"
)

// notesEnv makes the test binary the notes server (TestMain), as
// `mcp serve-notes` makes the program one.
const notesEnv = "HELIX_EXAMPLE_NOTES_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(notesEnv) == "1" {
		os.Args = []string{os.Args[0], "serve-notes"}
		main()
		os.Exit(0)
	}
	helixtest.Main(m)
}

// The agent adds a note through the MCP server once its approval is given,
// lists the notes, and answers.
func TestNotesAgent(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	require.NoError(t, err)
	var out strings.Builder
	require.NoError(t, run(t.Context(), helixtest.Database(t), mcp.Server{Name: "notes", Command: exe, Env: []string{notesEnv + "=1"}}, &out))
	require.Equal(t, `waiting for approval: notes__add_note {"text": "buy milk"}
agent: completed "Noted: buy milk."
tool notes__add_note: {"notes":["buy milk"]}
tool notes__list_notes: {"notes":["buy milk"]}
`, out.String())
}
