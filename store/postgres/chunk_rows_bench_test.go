package postgres

import (
	"testing"

	helix "github.com/helix-agents/helix-dbos"
)

// BenchmarkPackCommitRow packs a step's commit chunks into their row, as
// every step's commit does, and reports the row's body size.
func BenchmarkPackCommitRow(b *testing.B) {
	const run, cp = "01a215ce-0829-70cb-9613-e1fc6768ed49", "cpv1-01a215ce-0819-7c98-9b5b-0d73b259660a-s1-t1795662153813-28b066"
	base := helix.Base{AgentID: "01a215ce-0819-7c98-9b5b-0d73b259660a", AgentType: "bench", Timestamp: 1795662153813, Step: 1}
	var chunks []encodedChunk
	for _, c := range []helix.Chunk{
		&helix.ToolEndChunk{Base: base, ToolCallID: "call_0", ToolName: "noop", Result: []byte(`{"ok":"ok 0"}`)},
		&helix.StepEndChunk{Base: base, StepID: run + ":1", FinishReason: "other", Usage: &helix.Usage{}},
		&helix.CheckpointCreatedChunk{Base: base, RunID: run, CheckpointID: cp, StepCount: 1},
		&helix.StepCommittedChunk{Base: base, RunID: run, StepID: run + ":1", CheckpointID: cp},
	} {
		e, err := encodeChunk(base.AgentID, c, run, 0) // the session's own stream
		if err != nil {
			b.Fatal(err)
		}
		chunks = append(chunks, e)
	}
	b.ReportAllocs()
	var rows []chunkRow
	for b.Loop() {
		var err error
		if rows, err = packChunks(chunks); err != nil {
			b.Fatal(err)
		}
	}
	if len(rows) != 1 {
		b.Fatalf("%d rows, want 1", len(rows))
	}
	b.ReportMetric(float64(len(rows[0].body)), "body-B")
}

// BenchmarkPackDeltaRow packs one streamed text delta into its row, as a
// stream writer flushing a delta alone does, and reports the row's body
// size.
func BenchmarkPackDeltaRow(b *testing.B) {
	const session = "01a215ce-0819-7c98-9b5b-0d73b259660a"
	e, err := encodeChunk(session, &helix.TextDeltaChunk{Base: helix.Base{AgentID: session, AgentType: "bench", Timestamp: 1795662153813, Step: 1}, Delta: "token"}, "01a215ce-0829-70cb-9613-e1fc6768ed49", 0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var rows []chunkRow
	for b.Loop() {
		if rows, err = packChunks([]encodedChunk{e}); err != nil {
			b.Fatal(err)
		}
	}
	if len(rows) != 1 || rows[0].n != 1 {
		b.Fatalf("%d rows, want 1", len(rows))
	}
	b.ReportMetric(float64(len(rows[0].body)), "body-B")
}
