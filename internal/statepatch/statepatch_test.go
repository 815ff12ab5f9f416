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

func TestDiffAppendsComposeAndRoundTrip(t *testing.T) {
	base := json.RawMessage(`{"notes":["a"],"n":1,"m":{"x":[1]}}`)
	a := json.RawMessage(`{"notes":["a","b"],"n":2,"m":{"x":[1]}}`)
	b := json.RawMessage(`{"notes":["a","c"],"n":3,"m":{"x":[1,2]}}`)
	pa, err := statepatch.Diff(base, a)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := statepatch.Diff(base, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range append(append([]helix.PatchOp{}, pa...), pb...) {
		if op.Op == "add" && op.Path != "/notes/-" && op.Path != "/m/x/-" {
			t.Fatalf("append not expressed as /-: %+v", op)
		}
	}
	merged, warnings, err := statepatch.Apply(base, append(pa, pb...))
	if err != nil || len(warnings) > 0 {
		t.Fatalf("apply: %v %v", err, warnings)
	}
	var got map[string]any
	if err := json.Unmarshal(merged, &got); err != nil {
		t.Fatal(err)
	}
	if notes := got["notes"].([]any); len(notes) != 3 || notes[1] != "b" || notes[2] != "c" {
		t.Fatalf("appends did not compose: %s", merged)
	}
	if got["n"].(float64) != 3 {
		t.Fatalf("replace is not last-write-wins: %s", merged)
	}
	same, err := statepatch.Diff(a, a)
	if err != nil || len(same) != 0 {
		t.Fatalf("diff of equal documents: %v %v", same, err)
	}
}
