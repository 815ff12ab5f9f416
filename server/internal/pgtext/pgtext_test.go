package pgtext_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/server/internal/pgtext"
)

func TestJSONHasNUL(t *testing.T) {
	t.Parallel()
	for doc, want := range map[string]bool{
		`{"message":"a\u0000b"}`:              true,
		`{"messages":[{"content":"\u0000"}]}`: true,
		`{"a\u0000":1}`:                       true,
		`{"message":"a\\u0000b"}`:             false, // a backslash, then the text u0000
		`{"message":"hello"}`:                 false,
		`{"message":"a\u0000`:                 false, // invalid JSON: its decoding reports it
	} {
		require.Equal(t, want, pgtext.JSONHasNUL([]byte(doc)), doc)
	}
}
