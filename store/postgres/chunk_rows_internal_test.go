package postgres

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
)

// benchStep is one agent step of `helix-dbos bench` as the engine streams
// it: step_start and tool_start appended when the step begins, the rest with
// its commit.
func benchStep(run string) (begin, commit []helix.Chunk) {
	const cp = "cpv1-bench-8fbee99f-2-s52-t1795667664694-a3cf5d"
	base := func(ts int64) helix.Base {
		return helix.Base{AgentID: "bench-8fbee99f-2", AgentType: "helix-bench", Timestamp: ts, Step: 52}
	}
	yes := true
	begin = []helix.Chunk{
		&helix.StepStartChunk{Base: base(1795667664693), StepID: run + ":52"},
		&helix.ToolStartChunk{Base: base(1795667664693), ToolCallID: "call-52", ToolName: "noop", Arguments: json.RawMessage(`{}`)},
	}
	commit = []helix.Chunk{
		&helix.ToolEndChunk{Base: base(1795667664694), ToolCallID: "call-52", ToolName: "noop", Result: json.RawMessage(`{"ok":true}`), ProviderExecuted: &yes},
		&helix.StepEndChunk{Base: base(1795667664694), StepID: run + ":52", FinishReason: "tool-calls", Usage: &helix.Usage{}},
		&helix.CheckpointCreatedChunk{Base: base(1795667664694), RunID: run, CheckpointID: cp, StepCount: 52},
		&helix.StepCommittedChunk{Base: base(1795667664694), RunID: run, StepID: run + ":52", CheckpointID: cp},
	}
	return begin, commit
}

// encodeAll encodes chunks for stream "s" of run, as Append does.
func encodeAll(t testing.TB, run string, chunks []helix.Chunk) []encodedChunk {
	t.Helper()
	return encodeFor(t, "s", run, chunks)
}

// encodeFor encodes chunks for stream of run, as Append does.
func encodeFor(t testing.TB, stream, run string, chunks []helix.Chunk) []encodedChunk {
	t.Helper()
	out := make([]encodedChunk, len(chunks))
	for i, c := range chunks {
		if end, ok := c.(*helix.StreamEnd); ok { // as chunkBatch.addStreamEnd writes it
			raw, err := json.Marshal(end)
			require.NoError(t, err)
			out[i] = encodedChunk{streamID: stream, raw: raw}
			continue
		}
		e, err := encodeChunk(stream, c, run, 0)
		require.NoError(t, err)
		out[i] = e
	}
	return out
}

// requireReadsBack packs chunks and requires every row to read back byte for
// byte; it returns the rows.
func requireReadsBack(t *testing.T, chunks []encodedChunk) []chunkRow {
	t.Helper()
	rows, err := packChunks(chunks)
	require.NoError(t, err)
	var got [][]byte
	for _, r := range rows {
		_, raws, err := unpackRow([]byte(r.body), r.n, r.streamID, r.runID, r.step)
		require.NoError(t, err, "row %s", r.body)
		got = append(got, raws...)
	}
	require.Len(t, got, len(chunks))
	for i, c := range chunks {
		require.Equal(t, string(c.raw), string(got[i]), "chunk %d", i)
	}
	return rows
}

// benchAgent is benchStep's agent, whose own stream its chunks are in.
const benchAgent = "bench-8fbee99f-2"

// TestCodedRowSizes packs one bench step's two rows and pins the coded
// bodies: they are the stored format.
func TestCodedRowSizes(t *testing.T) {
	t.Parallel()
	const run = "01a215ce-0829-70cb-9613-e1fc6768ed49"
	begin, commit := benchStep(run)
	want := []string{
		`[3,{"A":"helix-bench"},{"t":0,"m":1795667664693},{"t":1,"c":"call-52","n":"noop","g":{}}]`,
		`[3,{"A":"helix-bench"},{"t":2,"m":1795667664694,"c":"call-52","n":"noop","r":{"ok":true},"x":true},` +
			`{"t":3,"U":[0,0],"f":"tool-calls"},{"t":4,"P":"a3cf5d"},5]`,
	}
	var plain, coded int
	for i, chunks := range [][]helix.Chunk{begin, commit} {
		enc := encodeFor(t, benchAgent, run, chunks)
		rowPlain := 0
		for _, e := range enc {
			rowPlain += len(e.raw)
		}
		rows := requireReadsBack(t, enc)
		require.Len(t, rows, 1)
		require.Equal(t, want[i], rows[0].body)
		plain, coded = plain+rowPlain, coded+len(rows[0].body)
		t.Logf("%d chunks: %d B as they are, %d B coded\n  %s", len(enc), rowPlain, len(rows[0].body), rows[0].body)
	}
	t.Logf("one step: %d B as they are, %d B coded", plain, coded)
	require.Less(t, coded*5, plain, "a step's coded rows take less than a fifth of its chunks' JSON")
}

// TestCodedRowsRoundTrip packs rows that exercise every code and every
// reason not to use one, and requires each chunk back byte for byte.
func TestCodedRowsRoundTrip(t *testing.T) {
	t.Parallel()
	const run = "01a215ce-0829-70cb-9613-e1fc6768ed49"
	yes := true
	base := func(agent string, step int, ts int64) helix.Base {
		return helix.Base{AgentID: agent, AgentType: "x", Timestamp: ts, Step: step}
	}
	b := base("ag", 4, 1795662153813)
	cases := map[string]struct {
		chunks []helix.Chunk
		stream string // "s" when empty
		run    string
		coded  bool     // written as a coded row
		in     []string // substrings of the stored body
		out    []string // not in it
	}{
		"user data with code-like keys is left alone": {
			chunks: []helix.Chunk{
				&helix.ToolStartChunk{Base: b, ToolCallID: "c", ToolName: "t", Arguments: json.RawMessage(`{"t":0,"a":"x","R":0,"P":"abc","U":[1],"~":"rs","type":"step_start","usage":{"inputTokens":1}}`)},
				&helix.ToolEndChunk{Base: b, ToolCallID: "c", ToolName: "t", Result: json.RawMessage(`[2,{"S":0},{"t":1}]`), ProviderExecuted: &yes},
				&helix.CustomEventChunk{Base: b, EventName: "S", Data: json.RawMessage(`{"checkpointId":"cpv1-ag-s4-t1795662153813-abc","runId":"` + run + `"}`)},
				&helix.TextDeltaChunk{Base: b, Delta: `[2,{"t":0}] "~" \u0000 <&>`},
			},
			run: run, coded: true,
			in: []string{`"P":"abc"`, `"checkpointId":"cpv1-ag-s4-t1795662153813-abc"`, `"type":"step_start"`, `"usage":{"inputTokens":1}`},
		},
		"a checkpoint ID of another agent, step or form is kept": {
			chunks: []helix.Chunk{
				&helix.CheckpointCreatedChunk{Base: b, RunID: run, CheckpointID: "cpv1-other-s4-t1795662153813-abc", StepCount: 4},
				&helix.CheckpointCreatedChunk{Base: b, RunID: run, CheckpointID: "cpv1-ag-s5-t1795662153813-abc", StepCount: 4},
				&helix.CheckpointCreatedChunk{Base: b, RunID: run, CheckpointID: "cpv1-ag-s04-t1795662153813-abc", StepCount: 4},
				&helix.CheckpointCreatedChunk{Base: b, RunID: run, CheckpointID: "cpv1-ag-s4-t1795662153813-a-b", StepCount: 4},
				&helix.CheckpointCreatedChunk{Base: b, RunID: run, CheckpointID: "not a checkpoint", StepCount: 4},
				&helix.StepCommittedChunk{Base: b, RunID: run, StepID: run + ":4", CheckpointID: ""},
			},
			run: run, coded: true,
			in:  []string{`"cpv1-other-s4-`, `"cpv1-ag-s5-`, `"cpv1-ag-s04-`, `-a-b"`, `"not a checkpoint"`, `"p":""`},
			out: []string{`"P"`},
		},
		"a checkpoint ID stamped at another millisecond keeps the difference": {
			chunks: []helix.Chunk{
				&helix.CheckpointCreatedChunk{Base: b, RunID: run, CheckpointID: "cpv1-ag-s4-t1795662153820-abc", StepCount: 4},
				&helix.StepCommittedChunk{Base: b, RunID: run, StepID: run + ":4", CheckpointID: "cpv1-ag-s4-t1795662153800-abc"},
			},
			run: run, coded: true,
			in: []string{`"P":[7,"abc"]`, `"P":[-13,"abc"]`},
		},
		"an agent ID JSON escapes, with dashes and -s1-t2 fragments": {
			chunks: []helix.Chunk{
				&helix.CheckpointCreatedChunk{Base: base("a<b>-s1-t2", 4, 9), RunID: run, CheckpointID: "cpv1-a<b>-s1-t2-s4-t9-abc", StepCount: 4},
				&helix.CheckpointCreatedChunk{Base: base("é-s1-t2", 4, 9), RunID: run, CheckpointID: "cpv1-é-s1-t2-s4-t9-abc", StepCount: 4},
			},
			run: run, coded: true,
			in: []string{`"p":"cpv1-a\u003cb\u003e-s1-t2-s4-t9-abc"`, `"P":"abc"`},
		},
		"another run's IDs and another step's are kept": {
			chunks: []helix.Chunk{
				&helix.StepCommittedChunk{Base: b, RunID: "another", StepID: "another:4", CheckpointID: "c1"},
				&helix.StepCommittedChunk{Base: b, RunID: run, StepID: run + ":5", CheckpointID: "c1"},
			},
			run: run, coded: true,
			in:  []string{`"i":"another"`, `"j":"another:4"`, `"j":"` + run + `:5"`},
			out: []string{`"R"`, `"P"`},
		},
		"a row without a run keeps runId and stepId": {
			chunks: []helix.Chunk{
				&helix.StepStartChunk{Base: b, StepID: ":4"},
				&helix.StepCommittedChunk{Base: b, RunID: "", StepID: ":4", CheckpointID: "c1"},
			},
			coded: true,
			in:    []string{`"i":""`, `"j":":4"`},
			out:   []string{`"R"`, `"J"`},
		},
		"usage: a prefix of its keys is coded, anything else kept": {
			chunks: []helix.Chunk{
				&helix.StepEndChunk{Base: b, Usage: &helix.Usage{InputTokens: 3, OutputTokens: 4, CachedTokens: 5}},
				&helix.StepEndChunk{Base: b, Usage: &helix.Usage{InputTokens: 3, OutputTokens: 4, CachedTokens: 5, CacheWriteTokens: 6}},
				&helix.StepEndChunk{Base: b, Usage: &helix.Usage{InputTokens: 3, CacheWriteTokens: 6}},
				&helix.StepEndChunk{Base: b},
			},
			coded: true,
			in:    []string{`"U":[3,4,5]`, `"U":[3,4,5,6]`, `"u":{"inputTokens":3,"outputTokens":0,"cacheWriteTokens":6}`},
		},
		"all types, every key": {
			chunks: allChunkTypes(b, run),
			run:    run, coded: true,
		},
		"a stream's end, with no base fields": {
			chunks: []helix.Chunk{
				&helix.RunQueuedChunk{Base: base("ag", 0, 5), Queue: "q"},
				&helix.StreamEnd{StreamID: "s", Timestamp: 5, FinalOutput: json.RawMessage(`{"w":1}`)},
			},
			coded: true,
			in:    []string{`{"t":32,"W":{"w":1}}`},
			out:   []string{`"w":"s"`, `"m":5}`},
		},
		"a session's chunks in its own stream leave out what the row and the chunk before give": {
			chunks: []helix.Chunk{
				&helix.StepStartChunk{Base: b, StepID: run + ":4"},
				&helix.TextDeltaChunk{Base: b, Delta: "d"},
				&helix.StepEndChunk{Base: b, StepID: run + ":4", FinishReason: "stop"},
				&helix.CheckpointCreatedChunk{Base: b, RunID: run, CheckpointID: "cpv1-ag-s4-t1795662153813-abc", StepCount: 4},
				&helix.StepCommittedChunk{Base: b, RunID: run, StepID: run + ":4", CheckpointID: "cpv1-ag-s4-t1795662153813-abc"},
				&helix.StepDiscardedChunk{Base: b, RunID: run, StepID: run + ":4", Reason: "r"},
				&helix.RunPausedChunk{Base: b, RunID: run, Reason: "r"},
			},
			stream: "ag", run: run, coded: true,
			in:  []string{`[3,{"A":"x"},{"t":0,"m":1795662153813},{"t":6,"d":"d"},{"t":3,"f":"stop"},{"t":4,"P":"abc"},5,{"t":29,"y":"r"},{"t":26,"y":"r"}]`},
			out: []string{`"a"`, `"s"`, `"S"`, `"i"`, `"R"`, `"j"`, `"J"`, `"k"`, `"-"`},
		},
		"a sub-agent's chunks in its parent's stream keep their agentId": {
			chunks: []helix.Chunk{
				&helix.StepStartChunk{Base: base("child", 4, 7), StepID: run + ":4"},
				&helix.TextDeltaChunk{Base: base("child", 4, 7), Delta: "d"},
			},
			stream: "parent", run: run, coded: true,
			in: []string{`[3,{"a":"child","A":"x"},{"t":0,"m":7},{"t":6,"d":"d"}]`},
		},
		"a row of the session's and a sub-agent's chunks": {
			chunks: []helix.Chunk{
				&helix.TextDeltaChunk{Base: base("parent", 4, 7), Delta: "d"},
				&helix.SubAgentStartChunk{Base: base("parent", 4, 7), SubAgentType: "t", SubSessionID: "child", CallID: "c"},
				&helix.TextDeltaChunk{Base: base("child", 4, 7), Delta: "e"},
				&helix.TextDeltaChunk{Base: base("parent", 4, 8), Delta: "f"},
			},
			stream: "parent", run: run, coded: true,
			in: []string{`{"t":6,"a":"child","d":"e"}`, `{"t":6,"T":1,"d":"f"}`},
		},
		"members a type implies that a chunk lacks or holds with another value": {
			chunks: []helix.Chunk{
				&helix.StepStartChunk{Base: b},
				&helix.StepEndChunk{Base: b, StepID: run + ":3"},
				&helix.CheckpointCreatedChunk{Base: b, RunID: run, CheckpointID: "cpv1-ag-s4-t1795662153813-abc", StepCount: 9},
				&helix.StepCommittedChunk{Base: b, RunID: "", StepID: run + ":4", CheckpointID: "cpv1-ag-s4-t1795662153813-xyz"},
				&helix.StepCommittedChunk{Base: b, RunID: run, StepID: run + ":4", CheckpointID: "cpv1-ag-s4-t1795662153813-xyz"},
				&helix.StepCommittedChunk{Base: b, RunID: run, StepID: run + ":4", CheckpointID: ""},
				&helix.RunResumedChunk{Base: b, RunID: "other", Mode: "m"},
			},
			stream: "ag", run: run, coded: true,
			in: []string{`{"t":0,"m":1795662153813,"-":"j"}`, `"j":"` + run + `:3"`, `"k":9`, `{"t":5,"i":"","P":"xyz"}`, `5,{"t":5,"p":""}`, `"i":"other"`},
		},
		"timestamps: the difference to the chunk before, either way, and at the ends of int64": {
			chunks: []helix.Chunk{
				&helix.TextDeltaChunk{Base: base("ag", 4, 10), Delta: "a"},
				&helix.TextDeltaChunk{Base: base("ag", 4, 10), Delta: "b"},
				&helix.TextDeltaChunk{Base: base("ag", 4, 13), Delta: "c"},
				&helix.TextDeltaChunk{Base: base("ag", 4, 7), Delta: "d"},
				&helix.TextDeltaChunk{Base: base("ag", 4, math.MaxInt64), Delta: "e"},
				&helix.TextDeltaChunk{Base: base("ag", 4, math.MinInt64), Delta: "f"},
			},
			stream: "ag", run: run, coded: true,
			in: []string{`[3,{"t":6,"A":"x"},{"m":10,"d":"a"},{"d":"b"},{"T":3,"d":"c"},{"T":-6,"d":"d"},`},
		},
		"an approval's ID is its run's and tool call's, unless it is another": {
			chunks: []helix.Chunk{
				&helix.ToolApprovalRequestChunk{Base: b, ToolCallID: "c<1>", ToolName: "n", ApprovalID: run + "::c<1>", Input: json.RawMessage(`{}`)},
				&helix.ToolApprovalResponseChunk{Base: b, ToolCallID: "c<1>", ToolName: "n", ApprovalID: run + "::c<1>", Approved: true},
				&helix.ToolApprovalRequestChunk{Base: b, ToolCallID: "c2", ToolName: "n", ApprovalID: "other::c2", Input: json.RawMessage(`{}`)},
			},
			stream: "ag", run: run, coded: true,
			in:  []string{`"v":"other::c2"`},
			out: []string{run, `"-"`},
		},
		"a chunk alone in its row is coded": {
			chunks: []helix.Chunk{&helix.ToolApprovalRequestChunk{Base: b, ToolCallID: "c", ToolName: "n", ApprovalID: "a", Input: json.RawMessage(`{}`)}},
			stream: "ag", run: run, coded: true,
			in: []string{`[3,{},{"t":13,"A":"x","m":1795662153813,"c":"c","n":"n","v":"a","I":{}}]`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			stream := tc.stream
			if stream == "" {
				stream = "s"
			}
			enc := encodeFor(t, stream, tc.run, tc.chunks)
			rows := requireReadsBack(t, enc)
			require.Len(t, rows, 1)
			body := rows[0].body
			require.Equal(t, tc.coded, strings.HasPrefix(body, "[3,"), body)
			for _, s := range tc.in {
				require.Contains(t, body, s)
			}
			for _, s := range tc.out {
				require.NotContains(t, body, s)
			}
		})
	}
}

// allChunkTypes returns a chunk of every type, with every field set.
func allChunkTypes(b helix.Base, run string) []helix.Chunk {
	yes, cp := true, "cpv1-ag-s4-t1795662153813-abc"
	raw := json.RawMessage(`{"k":[1,"v"]}`)
	return []helix.Chunk{
		&helix.TextDeltaChunk{Base: b, Delta: "d"},
		&helix.ThinkingChunk{Base: b, Content: "c", IsComplete: true},
		&helix.ToolArgStreamStartChunk{Base: b, ToolCallID: "c", ToolName: "n"},
		&helix.ToolArgStreamDeltaChunk{Base: b, ToolCallID: "c", Delta: "d"},
		&helix.ToolArgStreamEndChunk{Base: b, ToolCallID: "c"},
		&helix.ToolStartChunk{Base: b, ToolCallID: "c", ToolName: "n", Arguments: raw, ProviderExecuted: &yes},
		&helix.ToolEndChunk{Base: b, ToolCallID: "c", ToolName: "n", Result: raw, Error: "e", ErrorCode: "E", ProviderExecuted: &yes},
		&helix.ToolApprovalRequestChunk{Base: b, ToolCallID: "c", ToolName: "n", ApprovalID: "a", Input: raw, IsAutomatic: &yes},
		&helix.ToolApprovalResponseChunk{Base: b, ToolCallID: "c", ToolName: "n", ApprovalID: "a", Approved: true, Reason: "r", IsAutomatic: &yes},
		&helix.ToolInputErrorChunk{Base: b, ToolCallID: "c", ToolName: "n", Error: "e", PartialInput: raw},
		&helix.ToolOutputErrorChunk{Base: b, ToolCallID: "c", ToolName: "n", Error: "e"},
		&helix.SubAgentStartChunk{Base: b, SubAgentType: "t", SubSessionID: "s", CallID: "c"},
		&helix.SubAgentEndChunk{Base: b, SubAgentType: "t", SubSessionID: "s", CallID: "c", Result: raw},
		&helix.CustomEventChunk{Base: b, EventName: "e", Data: raw},
		&helix.StatePatchChunk{Base: b, Patches: []helix.PatchOp{{Op: "add", Path: "/a", Value: raw}}},
		&helix.ErrorChunk{Base: b, Error: "e", Code: "c", Recoverable: true, ErrorDetail: &helix.ErrorDetail{Message: "m", Code: "c", Retryable: &yes}},
		&helix.OutputChunk{Base: b, Output: raw},
		&helix.SourceURLChunk{Base: b, SourceID: "s", URL: "u", Title: "t"},
		&helix.SourceDocumentChunk{Base: b, SourceID: "s", MediaType: "m", Title: "t", Filename: "f"},
		&helix.StepStartChunk{Base: b, StepID: run + ":4"},
		&helix.StepEndChunk{Base: b, StepID: run + ":4", Usage: &helix.Usage{InputTokens: 1}, FinishReason: "stop"},
		&helix.FileChunk{Base: b, URL: "u", MediaType: "m", Filename: "f"},
		&helix.RunInterruptedChunk{Base: b, RunID: run, CheckpointID: &cp, Reason: "r"},
		&helix.RunResumedChunk{Base: b, RunID: run, FromCheckpointID: &cp, FromStepCount: 4, Mode: "m"},
		&helix.RunPausedChunk{Base: b, RunID: run, Reason: "r", PendingToolName: "n", PendingToolCallID: "c"},
		&helix.ExecutorSupersededChunk{Base: b},
		&helix.RunQueuedChunk{Base: b, RunID: run, Queue: "q", PartitionKey: "p"},
		&helix.CheckpointCreatedChunk{Base: b, RunID: run, CheckpointID: cp, StepCount: 4},
		&helix.StepCommittedChunk{Base: b, RunID: run, StepID: run + ":4", CheckpointID: cp},
		&helix.StepDiscardedChunk{Base: b, RunID: run, StepID: run + ":4", Reason: "r"},
		&helix.StreamResyncChunk{Base: b, CheckpointID: cp, StepCount: 4, MessageCount: 2, FromSequence: 9, Reason: "r"},
		&helix.SuspensionMarkerChunk{Base: b, Kind: "k", Payload: raw},
	}
}

// TestUncodableRowsFallBack packs chunks coding cannot hold (one with a key
// of one character, a code's length, or a key twice): the row's chunks are
// written a row per chunk, each as it is.
func TestUncodableRowsFallBack(t *testing.T) {
	t.Parallel()
	ok, err := encodeChunk("s", &helix.TextDeltaChunk{Base: helix.Base{AgentID: "a", AgentType: "x", Step: 1, Timestamp: 2}, Delta: "d"}, "r", 0)
	require.NoError(t, err)
	for _, raw := range []string{
		`{"type":"text_delta","agentId":"a","agentType":"x","timestamp":2,"step":1,"delta":"d","t":0}`,
		`{"type":"text_delta","agentId":"a","agentType":"x","timestamp":2,"step":1,"delta":"d","delta":"e"}`,
		`{"type":"text_delta","agentId":"a","agentType":"x","timestamp":2,"step":1,"~":"rs"}`,
		`[1]`,
	} {
		odd := ok
		odd.raw = []byte(raw)
		_, codable := packCoded([]encodedChunk{ok, odd})
		require.False(t, codable, raw)
		rows, err := packChunks([]encodedChunk{ok, odd, ok})
		require.NoError(t, err)
		require.Len(t, rows, 3, raw)
		for i, want := range []encodedChunk{ok, odd, ok} {
			require.Equal(t, string(want.raw), rows[i].body)
			require.Equal(t, 1, rows[i].n)
		}
	}
}

// FuzzCodedRows packs rows of user text and JSON, of a session in its own
// stream or a sub-agent in its parent's, and requires them back byte for
// byte, coded or not.
func FuzzCodedRows(f *testing.F) {
	f.Add("d", `{"a":1}`, "ag", int64(5), 3, "abc", true)
	f.Add(`"~"`, `{"t":0,"P":"x"}`, "a<b>-s1-t2", int64(0), 0, "0", false)
	f.Add("[2,", `[2,{"S":0}]`, "é", int64(-1), 12, "", true)
	f.Add("[3,", `{"T":1,"-":"am"}`, "s", int64(math.MaxInt64), 1, "x", false)
	f.Add("0", `{}`, "0", int64(5), 3, "\x80", true) // json.Marshal writes \ufffd, readers would write U+FFFD
	f.Fuzz(func(t *testing.T, text, data, agent string, ts int64, step int, random string, own bool) {
		if !json.Valid([]byte(data)) {
			return
		}
		stream := "parent"
		if own {
			stream = agent
		}
		b := helix.Base{AgentID: agent, AgentType: text, Timestamp: ts, Step: step}
		later := b
		later.Timestamp += int64(len(data))
		sub := b
		sub.AgentID = text
		cp := helix.FormatCheckpointID(helix.ParsedCheckpointID{SessionID: agent, StepCount: step, Timestamp: ts + int64(len(text)), Random: random})
		enc := encodeFor(t, stream, "run", []helix.Chunk{
			&helix.StepStartChunk{Base: b, StepID: "run:" + text},
			&helix.TextDeltaChunk{Base: b, Delta: text},
			&helix.TextDeltaChunk{Base: sub, Delta: data},
			&helix.CustomEventChunk{Base: later, EventName: text, Data: json.RawMessage(data)},
			&helix.CheckpointCreatedChunk{Base: b, RunID: "run", CheckpointID: cp, StepCount: step + len(random)},
			&helix.StepCommittedChunk{Base: later, RunID: text, StepID: "run:" + text, CheckpointID: cp},
			&helix.ToolApprovalRequestChunk{Base: later, ToolCallID: text, ToolName: "n", ApprovalID: "run::" + text, Input: json.RawMessage(data)},
			&helix.ToolApprovalResponseChunk{Base: b, ToolCallID: random, ToolName: "n", ApprovalID: "run::" + text, Approved: own},
		})
		requireReadsBack(t, enc)
		for _, c := range enc {
			requireReadsBack(t, []encodedChunk{c})
		}
	})
}

// TestRowsOfNoFormatFail reads bodies that are none of a row's three forms
// (a marker row, a coded row, a chunk alone as its JSON): an error naming
// what is wrong, never chunks made up from them.
func TestRowsOfNoFormatFail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body string
		n    int
		err  string
	}{
		{`[{"agentId":"a","step":1},{"type":"text_delta","delta":"d"},{"type":"text_delta","delta":"e"}]`, 2, "neither coded"},
		{`[2,{"a":"a","S":0},{"t":6,"d":"d"},{"t":6,"d":"e"}]`, 2, "neither coded"},
		{`[2,{},{"t":6,"d":"d"}]`, 1, "neither coded"},
		{`[3,{},{"t":6,"d":"d"}]`, 2, "row says 2 chunks, holds 1"},
		{`[3,{},{"t":99}]`, 1, "unknown type code 99"},
		{`[4,0,5,"r",{},6]`, 1, "without its sources"},
	} {
		_, _, err := unpackRow([]byte(tc.body), tc.n, "s", "r", 1)
		require.ErrorContains(t, err, tc.err, tc.body)
	}
}
