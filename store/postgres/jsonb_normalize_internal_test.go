package postgres

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// TestNormalizeJSONBAgreesWithPostgres: a marker row derives a tool call's
// arguments only when normalizeJSONB of the arguments the writer holds is
// sure of them, and the reader renders them from normalizeJSONB of the text
// Postgres's jsonb gives back. So for every input normalizeJSONB accepts,
// both must give the same bytes, or a reader would render other arguments
// than the chunk held. (A document the database refuses fails the
// message's write itself, so it does not count.) Checked against the
// server itself on hand-picked
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
	accepted, refused := 0, 0
	for _, in := range inputs {
		want, ok := normalizeJSONB([]byte(in))
		if !ok {
			continue
		}
		var back string
		if err := pool.QueryRow(t.Context(), `SELECT $1::jsonb::text`, in).Scan(&back); err != nil {
			// The database refuses the document (a \u escape of a code
			// point its encoding lacks, as in a SQL_ASCII database): so
			// does the commit that would write the message, marker or
			// not. Any other error is the test's.
			var pgErr *pgconn.PgError
			require.True(t, errors.As(err, &pgErr) && (pgErr.Code == "0A000" || strings.HasPrefix(pgErr.Code, "22")),
				"jsonb of %q: %v", in, err)
			refused++
			continue
		}
		got, ok := normalizeJSONB([]byte(back))
		require.True(t, ok, "jsonb's text %q of %q", back, in)
		require.Equal(t, string(want), string(got), "input %q, jsonb gave %q", in, back)
		accepted++
	}
	t.Logf("%d documents both accept, %d the database refuses, of %d", accepted, refused, len(inputs))
	require.Greater(t, accepted, len(inputs)/4, "a good part of the random documents are ones a marker derives")
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
