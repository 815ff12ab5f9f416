package statepatch_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/statepatch"
)

func TestApply(t *testing.T) {
	t.Parallel()
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	out, warnings, err := statepatch.Apply(nil, []helix.PatchOp{
		{Op: "add", Path: "/list", Value: raw(`[]`)},
		{Op: "add", Path: "/list/-", Value: raw(`1`)},
		{Op: "add", Path: "/list/-", Value: raw(`2`)},
		{Op: "add", Path: "/nil", Value: raw(`null`)},
		{Op: "remove", Path: "/missing"},
		{Op: "replace", Path: "", Value: raw(`[1]`)},
		{Op: "bogus", Path: "/x"},
		{Op: "move", From: "/list", Path: "/moved"},
	})
	require.NoError(t, err)
	require.JSONEq(t, `{"moved":[1,2],"nil":null}`, string(out))
	require.Len(t, warnings, 3)
	require.Contains(t, warnings[1], "must stay a JSON object")

	_, _, err = statepatch.Apply(raw(`[1]`), nil)
	require.Error(t, err)
	require.True(t, statepatch.IsObject([]byte(` {"a":1} `)))
	require.False(t, statepatch.IsObject([]byte(`{"a":`)))
}
