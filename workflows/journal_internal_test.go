package workflows

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/steps"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A row of the step journal holds one record in its columns, or several in
// its output; the journal replays them as written. The
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
		`["helix.fire_hooks",-2,6,null],[1,8,9,null,null]]`), nil)
	require.NoError(t, err)
	require.Equal(t, []journalRecord{
		{ID: 10, Name: "helix.run_tool", Output: s(`{"k": [1, 2]}`), Err: s(`it "failed"`)},
		{ID: 11, Name: "helix.fire_hooks"},
		{ID: 12, Name: "helix.commit_step", Output: s(`null`)},
	}, recs, "an output as written (JSON null is not SQL NULL), an error decoded, a coded name named")

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
		{"name neither a string nor a code", s(`[["a",0,0,null,1],[true,0,0,null]]`), 2, "decode the name of step 11"},
		{"code past the table", s(`[["a",0,0,null,1],[99,0,0,null]]`), 2, "unknown step name code 99"},
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

// A commit's checkpoint carries the records written with it: the last run of consecutive IDs, sorted (parallel tools are
// recorded as they end), the records before it left for helix.step_journal;
// they read back as written, times aside, and the commit's record, which
// does not repeat its checkpoint's ID, with it back in its output.
func TestCheckpointRecordsReadBack(t *testing.T) {
	t.Parallel()
	s := func(v string) *string { return &v }
	const at = 1_700_000_000_000
	j := &journal{scope: journalScope{segment: 2}}
	commit := codeOutput(`{"messageCount":5}`)
	recs := []journalRecord{
		{ID: 13, Name: steps.NameRunTool, Output: s(`{"ok":true}`), Started: at + 4, Completed: at + 9},
		{ID: 10, Name: steps.NameRunTool, Output: s(`1`), Started: at, Completed: at + 3},
		{ID: 12, Name: steps.NameRunTool, Err: s(`it "failed"`), Output: s(`null`), Started: at - 2, Completed: at + 8},
		{ID: 14, Name: steps.NameCommitStep, Output: &commit, Started: at + 10, Completed: at + 11},
	}
	// The engine's names are coded, the commit whose output is the
	// checkpoint's message count alone is the short entry.
	text, lead, err := j.checkpointRecords(recs, 5)
	require.NoError(t, err)
	require.Equal(t, []journalRecord{recs[1]}, lead, "step 10 is not next to the others")
	require.Equal(t, `[2,12,1699999999998,[0,0,10,"it \"failed\"",null],[0,6,11,null,{"ok":true}],[12,13]]`, text)

	got, err := unpackCheckpoint("cp-1", text, 5)
	require.NoError(t, err)
	withID := codeOutput(`{"checkpointId":"cp-1","messageCount":5}`)
	require.Equal(t, []journalRecord{
		{ID: 12, Name: steps.NameRunTool, Err: s(`it "failed"`), Output: s(`null`)},
		{ID: 13, Name: steps.NameRunTool, Output: s(`{"ok":true}`)},
		{ID: 14, Name: steps.NameCommitStep, Output: &withID},
	}, got)
	out, err := decode[steps.CommitOutput](got[2])
	require.NoError(t, err)
	require.Equal(t, steps.CommitOutput{CheckpointID: "cp-1", MessageCount: 5}, out)

	text, lead, err = j.checkpointRecords(recs[3:], 5)
	require.NoError(t, err)
	require.Empty(t, lead)
	require.Equal(t, `[2,14,1700000000010,[0,1]]`, text, "a commit alone")
	_, err = unpackCheckpoint("cp-1", `[2,12,0,[12,13],[0,0,10,null]]`, 5)
	require.ErrorContains(t, err, "short commit entry but not the last")
	_, err = unpackCheckpoint("cp-1", `[2,12,0,[999,0,10,null]]`, 5)
	require.ErrorContains(t, err, "unknown step name code 999")

	// Anything else keeps the long form: another message count, an error,
	// more in the output, another name.
	other := codeOutput(`{"messageCount":5,"interrupted":true}`)
	for _, c := range []struct {
		rec  journalRecord
		want string
	}{
		{journalRecord{ID: 14, Name: steps.NameCommitStep, Output: &commit, Started: at, Completed: at + 1}, `[1,0,1,null,{"<o":5}]`},
		{journalRecord{ID: 14, Name: steps.NameCommitStep, Output: &commit, Err: s("x"), Started: at, Completed: at + 1}, `[1,0,1,"x",{"<o":5}]`},
		{journalRecord{ID: 14, Name: steps.NameCommitStep, Output: &other, Started: at, Completed: at + 1}, `[1,0,1,null,` + other + `]`},
		{journalRecord{ID: 14, Name: "app.step", Output: &commit, Started: at, Completed: at + 1}, `["app.step",0,1,null,{"<o":5}]`},
	} {
		mc := 6
		if c.rec.Output == &other || c.rec.Name == "app.step" || c.rec.Err != nil {
			mc = 5
		}
		text, _, err := j.checkpointRecords([]journalRecord{c.rec}, mc)
		require.NoError(t, err)
		require.Equal(t, `[2,14,1700000000000,`+c.want+`]`, text)
		back, err := unpackCheckpoint("cp", text, mc)
		require.NoError(t, err)
		require.Equal(t, c.rec.Name, back[0].Name)
		require.Equal(t, c.rec.Err, back[0].Err)
	}

	for _, c := range []struct{ text, want string }{
		{`{}`, "decode the records checkpoint cp carries"},
		{`[0,1,2]`, "have 3 parts, want at least 4"},
		{`[0,"x",2,["a",0,0,null]]`, "decode the first step"},
		{`[0,1,2,"a"]`, "decode the record of step 1"},
		{`[0,1,2,["a",0,1]]`, "record of step 1 has 3 fields"},
		{`[0,1,2,["a",0]]`, "short commit entry of step 1 checkpoint cp carries has times that are not integers"},
	} {
		_, err := unpackCheckpoint("cp", c.text, 0)
		require.ErrorContains(t, err, c.want, c.text)
	}
	require.Equal(t, codeOutput(`{"checkpointId":"c"}`), withCheckpointID(`{}`, "c"))
	require.Equal(t, `null`, withCheckpointID(`null`, "c"), "not an object: as it is")
}

// unpackCheckpoint reads what the database holds: records with consecutive
// IDs from the first, or an error, and never a panic.
func FuzzUnpackCheckpoint(f *testing.F) {
	f.Add(`[0,7,1700000000000,["helix.run_tool",0,5,null,{"ok":true}],["helix.commit_step",6,7,null,{"<o":3}]]`)
	f.Add(`[1,1,0,["helix.commit_step",0,0,null,{}]]`)
	f.Add(`[0,1,2,[]]`)
	f.Add(`[0,7,1700000000000,[0,0,5,null,{"ok":true}],[6,7]]`)
	f.Fuzz(func(t *testing.T, text string) {
		recs, err := unpackCheckpoint("cp", text, 3)
		if err != nil {
			return
		}
		require.NotEmpty(t, recs)
		for i, r := range recs {
			require.Equal(t, recs[0].ID+i, r.ID)
		}
	})
}
