package postgres

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Golden sources and chunks of a marker row: a step of session s1 (stream
// s1, run r1, step 3) with held starts, two tool calls (the second fails)
// and a state patch.
var (
	goldenCheckpoint = "cpv1-s1-s3-t1795687220565-ee0e2a"
	goldenUsage      = `[{"t":"model","n":"bench","i":30,"o":3,"k":"model~"},{"t":"tool","n":"noop","d":0,"k":"tool~:c1"}]`
	goldenMessages   = []string{
		`{"role": "assistant", "content": "", "toolCalls": [{"id": "c1", "name": "noop", "arguments": {"i": 1, "zz": [1.50, "<x>"]}}, {"id": "c2", "name": "noop", "arguments": {"i": 2}}]}`,
		`{"role": "tool", "content": "{\"ok\":\"ok 1\"}", "toolName": "noop", "toolCallId": "c1"}`,
		`{"role": "tool", "content": "{\"error\":\"boom\"}", "toolName": "noop", "toolCallId": "c2"}`,
	}
	goldenRaws = []string{
		`{"type":"step_start","agentId":"s1","agentType":"bench","timestamp":1795687220561,"step":3,"stepId":"r1:3"}`,
		`{"type":"tool_start","agentId":"s1","agentType":"bench","timestamp":1795687220561,"step":3,"toolCallId":"c1","toolName":"noop","arguments":{"i":1,"zz":[1.50,"\u003cx\u003e"]}}`,
		`{"type":"tool_start","agentId":"s1","agentType":"bench","timestamp":1795687220562,"step":3,"toolCallId":"c2","toolName":"noop","arguments":{"i":2}}`,
		`{"type":"tool_end","agentId":"s1","agentType":"bench","timestamp":1795687220564,"step":3,"toolCallId":"c1","toolName":"noop","result":{"ok":"ok 1"},"providerExecuted":true}`,
		`{"type":"tool_end","agentId":"s1","agentType":"bench","timestamp":1795687220564,"step":3,"toolCallId":"c2","toolName":"noop","result":null,"error":"boom","errorCode":"TOOL_FAILED","providerExecuted":true}`,
		`{"type":"state_patch","agentId":"s1","agentType":"bench","timestamp":1795687220564,"step":3,"patches":[{"op":"add","path":"/n","value":3}]}`,
		`{"type":"step_end","agentId":"s1","agentType":"bench","timestamp":1795687220565,"step":3,"stepId":"r1:3","usage":{"inputTokens":30,"outputTokens":3},"finishReason":"tool-calls"}`,
		`{"type":"checkpoint_created","agentId":"s1","agentType":"bench","timestamp":1795687220565,"step":3,"runId":"r1","checkpointId":"cpv1-s1-s3-t1795687220565-ee0e2a","stepCount":3}`,
		`{"type":"step_committed","agentId":"s1","agentType":"bench","timestamp":1795687220565,"step":3,"runId":"r1","stepId":"r1:3","checkpointId":"cpv1-s1-s3-t1795687220565-ee0e2a"}`,
	}
	// goldenMarker is what packMarker wrote for them when format 4 was
	// made; never change it (a change of the renderer is format 5).
	goldenMarker = `[4,3,1795687220565,"ee0e2a",{},{"t":0,"T":-4},{"t":1,"g":{"i":1,"zz":[1.50,"\u003cx\u003e"]}},{"t":1,"T":1},{"t":2,"T":2},{"t":2,"r":null,"e":"boom","E":"TOOL_FAILED"},{"t":20,"h":[{"op":"add","path":"/n","value":3}]},{"t":3,"T":1,"f":"tool-calls"},4,5]`
)

func goldenSources(t *testing.T) *markerRow {
	msgs := make([][]byte, len(goldenMessages))
	for i, m := range goldenMessages {
		msgs[i] = []byte(m)
	}
	m, err := newMarkerRow(goldenCheckpoint, "bench", []byte(goldenUsage), msgs)
	require.NoError(t, err)
	return m
}

// TestMarkerRenderIsFrozen: a golden marker row renders the golden chunks
// from the golden sources (jsonb's text of the messages), byte for byte,
// and packing the chunks gives the golden row again. Format 4 is stored:
// if this fails, the renderer changed, and rows written before would read
// differently.
func TestMarkerRenderIsFrozen(t *testing.T) {
	_, raws, err := unpackRowWith([]byte(goldenMarker), len(goldenRaws), "s1", "r1", 3, goldenSources(t))
	require.NoError(t, err)
	got := make([]string, len(raws))
	for i, r := range raws {
		got[i] = string(r)
	}
	require.Equal(t, goldenRaws, got)

	chunks := goldenChunks()
	coded, err := packChunks(chunks)
	require.NoError(t, err)
	require.Len(t, coded, 1)
	rows, err := packChunksWith(chunks, &markerWrite{runID: "r1", step: 3, src: goldenSources(t)})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, goldenMarker, rows[0].body)
	t.Logf("format 3: %d bytes, marker: %d bytes", len(coded[0].body), len(rows[0].body))
}

// goldenChunks returns the golden chunks as a step commit of run r1, step
// 3, in stream s1 appends them.
func goldenChunks() []encodedChunk {
	chunks := make([]encodedChunk, len(goldenRaws))
	for i, r := range goldenRaws {
		chunks[i] = encodedChunk{streamID: "s1", runID: "r1", step: 3, raw: []byte(r)}
	}
	return chunks
}

// TestMarkerFallsBack: a commit's chunks are a marker row only where one
// renders back and is shorter; else they are written as without sources (a
// coded row, or a row per chunk as it is), and read back byte for byte.
func TestMarkerFallsBack(t *testing.T) {
	t.Parallel()
	m := &markerWrite{runID: "r1", step: 3, src: goldenSources(t)}
	other := goldenChunks()
	for i := range other {
		other[i].step = 4
	}
	replaced := goldenChunks()
	replaced[0].raw = []byte(strings.Replace(goldenRaws[0], `"stepId":"r1:3"`, `"stepId":"r1:3\ufffd"`, 1))
	delta := []encodedChunk{{streamID: "s1", runID: "r1", step: 3,
		raw: []byte(`{"type":"text_delta","agentId":"s1","agentType":"bench","timestamp":1795687220561,"step":3,"delta":"d"}`)}}
	for name, tc := range map[string]struct {
		chunks []encodedChunk
		rows   int
		prefix string
	}{
		"another step's chunks":              {other, 1, "[3,"},
		"a chunk with replaced UTF-8":        {replaced, len(goldenRaws), "{"},
		"a marker longer than the coded row": {delta, 1, "[3,"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rows, err := packChunksWith(tc.chunks, m)
			require.NoError(t, err)
			require.Len(t, rows, tc.rows)
			var got []string
			for _, r := range rows {
				require.True(t, strings.HasPrefix(r.body, tc.prefix), r.body)
				_, raws, err := unpackRow([]byte(r.body), r.n, r.streamID, r.runID, r.step)
				require.NoError(t, err, r.body)
				for _, raw := range raws {
					got = append(got, string(raw))
				}
			}
			want := make([]string, len(tc.chunks))
			for i, c := range tc.chunks {
				want[i] = string(c.raw)
			}
			require.Equal(t, want, got)
		})
	}
}
