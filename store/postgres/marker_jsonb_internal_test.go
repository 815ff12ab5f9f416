package postgres

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// TestNormalizeJSONBAgreesWithPostgres: a marker row derives a tool call's
// arguments only when normalizeJSONB of the arguments the writer holds is
// sure of them, and the reader renders them from normalizeJSONB of the text
// Postgres's jsonb gives back. So for every input normalizeJSONB accepts,
// both must give the same bytes, or a reader would render other arguments
// than the chunk held. Checked against the server itself on hand-picked
// inputs (key order, duplicate keys, escapes, numbers in every form,
// non-ASCII text) and on 3,000 random documents of the same ingredients.
func TestNormalizeJSONBAgreesWithPostgres(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	inputs := []string{
		`{}`, `[]`, `{"b":1,"a":2}`, `{"aa":1,"b":2}`, `{"a":1,"a":2}`, `{"a":{"a":1,"a":[]}}`,
		`{"s":"\u00e9\/\u001f\t\"\\"}`, `{"s":"\ud83d\ude00 😀"}`, `{"\u0041":"A"}`,
		`{"n":[0,-0,-0.0,0.0,1.50,1e2,1E2,1.0e-3,-1,123456789012345678901234567890.000]}`,
		`{"n":[00, 01, .5, 5., +1]}`, `[true,false,null,"x", 1 ]`, " {\n \"k\" :\t\"v\" } ",
		`{"s":"\u0000"}`, `{"s":"\ud800"}`, `"top"`, `12`, `null`,
	}
	r := rand.New(rand.NewPCG(15, 2026))
	for range 3000 {
		inputs = append(inputs, randomJSON(r, 0))
	}
	accepted := 0
	for _, in := range inputs {
		want, ok := normalizeJSONB([]byte(in))
		if !ok {
			continue
		}
		var back string
		if err := pool.QueryRow(t.Context(), `SELECT $1::jsonb::text`, in).Scan(&back); err != nil {
			t.Fatalf("normalizeJSONB accepted %q, which jsonb refuses: %v", in, err)
		}
		got, ok := normalizeJSONB([]byte(back))
		require.True(t, ok, "jsonb's text %q of %q", back, in)
		require.Equal(t, string(want), string(got), "input %q, jsonb gave %q", in, back)
		accepted++
	}
	require.Greater(t, accepted, 2000, "most random documents are ones a marker derives")
}

// randomJSON builds a JSON document from the ingredients jsonb rewrites:
// keys of several lengths in any order (duplicates included), strings with
// escapes and non-ASCII text, numbers in many forms, spaces.
func randomJSON(r *rand.Rand, depth int) string {
	keys := []string{"a", "b", "aa", "ab", "Z", "é", "a b", "\\u0061", "\\n", "key"}
	strs := []string{"x", "\\u00e9", "😀", "\\\"q\\\"", "\\/", "\\t\\r\\n", "\\u001f", "<&>", "\\ud83d\\ude00", ""}
	nums := []string{"0", "-1", "1.50", "1e2", "2E-3", "0.000", "-0", "12345678901234567890", "3.14159", "-0.5"}
	sp := func() string { return []string{"", " ", "\n", "\t "}[r.IntN(4)] }
	switch k := r.IntN(10); {
	case depth < 3 && k < 4:
		var b strings.Builder
		b.WriteString("{" + sp())
		for i := range r.IntN(5) {
			if i > 0 {
				b.WriteString("," + sp())
			}
			fmt.Fprintf(&b, `"%s"%s:%s%s`, keys[r.IntN(len(keys))], sp(), sp(), randomJSON(r, depth+1))
		}
		return b.String() + sp() + "}"
	case depth < 3 && k < 6:
		parts := make([]string, r.IntN(4))
		for i := range parts {
			parts[i] = randomJSON(r, depth+1)
		}
		return "[" + strings.Join(parts, ","+sp()) + "]"
	case k < 8:
		return `"` + strs[r.IntN(len(strs))] + strs[r.IntN(len(strs))] + `"`
	case k < 9:
		return nums[r.IntN(len(nums))]
	}
	return []string{"true", "false", "null"}[r.IntN(3)]
}
