package workflows

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A row of the step journal holds one record in its columns, or several in
// its output (migration 00020); the journal replays them as written. The
// row's format is the migration's, end to end in engine's
// TestJournalWriteOfSeveralRecordsIsOneRowAndReplays and migrations'
// TestStepJournalRowsPackRecords.
func TestUnpackJournalRow(t *testing.T) {
	t.Parallel()
	s := func(v string) *string { return &v }
	recs, err := unpack(7, 1, "helix.call_model", s(`{"a":1}`), nil)
	require.NoError(t, err)
	require.Equal(t, []journalRecord{{ID: 7, Name: "helix.call_model", Output: s(`{"a":1}`)}}, recs)

	recs, err = unpack(10, 3, "", s(`[["helix.run_tool",0,5,"it \"failed\"",{"k": [1, 2]}],`+
		`["helix.fire_hooks",-2,6,null],["helix.commit_step",8,9,null,null]]`), nil)
	require.NoError(t, err)
	require.Equal(t, []journalRecord{
		{ID: 10, Name: "helix.run_tool", Output: s(`{"k": [1, 2]}`), Err: s(`it "failed"`)},
		{ID: 11, Name: "helix.fire_hooks"},
		{ID: 12, Name: "helix.commit_step", Output: s(`null`)},
	}, recs, "an output as written (JSON null is not SQL NULL), an error decoded")

	for _, c := range []struct {
		name   string
		output *string
		n      int
		want   string
	}{
		{"no output", nil, 2, "has no records"},
		{"not JSON", s(`[[`), 2, "decode the step journal's row of steps 10 to 11"},
		{"fewer records", s(`[["a",0,0,null,1]]`), 2, "holds 1 records"},
		{"short record", s(`[["a",0,0,null,1],["b",0,0]]`), 2, "record of step 11 has 3 fields"},
		{"name not a string", s(`[["a",0,0,null,1],[1,0,0,null]]`), 2, "decode the name of step 11"},
		{"error not a string", s(`[["a",0,0,2,1],["b",0,0,null]]`), 2, "decode the error of step 10"},
	} {
		_, err := unpack(10, c.n, "", c.output, nil)
		require.ErrorContains(t, err, c.want, c.name)
	}
}

// unpack reads rows the database wrote: whatever their output, it returns
// n records with consecutive IDs, or an error, and never panics.
func FuzzUnpackJournalRow(f *testing.F) {
	f.Add(2, `[["helix.run_tool",0,5,null,{"ok":true}],["helix.commit_step",0,1,null,{"n":3}]]`)
	f.Add(3, `[["a",0,0,"e"],["b",1,2,null,"x"],["c",null,null,null,[]]]`)
	f.Add(2, `[]`)
	f.Add(2, `[["a"],["b",1,2,3,4,5]]`)
	f.Fuzz(func(t *testing.T, n int, output string) {
		if n < 2 || n > 1000 {
			return
		}
		recs, err := unpack(100, n, "", &output, nil)
		if err != nil {
			return
		}
		require.Len(t, recs, n)
		for i, r := range recs {
			require.Equal(t, 100+i, r.ID)
		}
	})
}
