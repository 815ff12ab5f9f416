package helix_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
)

// fixtures loads testdata/chunks: one golden file per chunk type, written
// from the specification's interfaces, plus edge variants (type.variant.json).
func fixtures(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob("testdata/chunks/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		out[strings.TrimSuffix(filepath.Base(f), ".json")] = b
	}
	return out
}

func TestChunkFixturesRoundTripExactly(t *testing.T) {
	t.Parallel()
	for name, data := range fixtures(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := helix.UnmarshalChunk(data)
			require.NoError(t, err)
			require.NotNil(t, c)
			wantType, _, _ := strings.Cut(name, ".")
			require.Equal(t, helix.ChunkType(wantType), c.ChunkType())
			out, err := json.Marshal(c)
			require.NoError(t, err)
			require.JSONEq(t, string(data), string(out), "decode → encode must reproduce the fixture")
			// The concrete value also marshals the same way (value receivers).
			v := reflect.ValueOf(c).Elem().Interface()
			out2, err := json.Marshal(v)
			require.NoError(t, err)
			require.JSONEq(t, string(data), string(out2))
			if c.ChunkType() != helix.ChunkStreamEnd {
				require.Equal(t, 3, c.ChunkBase().Step)
			} else {
				require.Nil(t, c.ChunkBase())
			}
		})
	}
}

func TestEveryChunkTypeHasAFixture(t *testing.T) {
	t.Parallel()
	fx := fixtures(t)
	types := helix.ChunkTypes()
	require.GreaterOrEqual(t, len(types), 32, "31 data chunk types plus stream_end")
	for _, typ := range types {
		require.Contains(t, fx, string(typ))
		require.True(t, typ.Valid())
	}
	require.False(t, helix.ChunkType("nope").Valid())
	require.True(t, helix.ChunkTextDelta.IsDelta())
	require.False(t, helix.ChunkToolStart.IsDelta())
}

func TestUnmarshalChunkRejectsMalformed(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"not JSON":           `{"type":`,
		"null":               `null`,
		"array":              `[{"type":"text_delta"}]`,
		"string":             `"text_delta"`,
		"missing type":       `{"delta":"x","agentId":"a","agentType":"b","timestamp":1,"step":0}`,
		"unknown type":       `{"type":"text_delta_v2","delta":"x","agentId":"a","agentType":"b","timestamp":1,"step":0}`,
		"type not a string":  `{"type":7}`,
		"wrong field type":   `{"type":"text_delta","delta":7,"agentId":"a","agentType":"b","timestamp":1,"step":0}`,
		"wrong base type":    `{"type":"text_delta","delta":"x","agentId":"a","agentType":"b","timestamp":"now","step":0}`,
		"unknown field":      `{"type":"text_delta","delta":"x","agentId":"a","agentType":"b","timestamp":1,"step":0,"colour":"red"}`,
		"bad nested":         `{"type":"step_end","agentId":"a","agentType":"b","timestamp":1,"step":0,"usage":{"inputTokens":"many"}}`,
		"trailing garbage":   `{"type":"output","output":1,"agentId":"a","agentType":"b","timestamp":1,"step":0} x`,
		"stream_end no id":   `{"type":"stream_end","timestamp":1}`,
		"checkpoint missing": `{"type":"run_interrupted","runId":"r","agentId":"a","agentType":"b","timestamp":1,"step":0}`,
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := helix.UnmarshalChunk([]byte(data))
			require.Error(t, err)
			require.Nil(t, c, "never a zero value")
		})
	}
}

// TestUnmarshalChunkRequiresEveryRequiredField deletes, one at a time, each
// field the specification marks required from each base fixture.
func TestUnmarshalChunkRequiresEveryRequiredField(t *testing.T) {
	t.Parallel()
	optional := map[string]bool{ // fields the spec marks with ?
		"error": true, "errorCode": true, "providerExecuted": true, "isAutomatic": true, "reason": true,
		"partialInput": true, "code": true, "errorDetail": true, "title": true, "filename": true, "stepId": true,
		"usage": true, "finishReason": true, "pendingToolName": true, "pendingToolCallId": true, "finalOutput": true,
		"partitionKey": true,
	}
	required := map[string]map[string]bool{ // exceptions: optional elsewhere, required here
		"tool_input_error":  {"error": true},
		"tool_output_error": {"error": true},
		"error":             {"error": true},
		"source_document":   {"title": true},
		"run_paused":        {"reason": true},
		"step_discarded":    {"reason": true},
		"stream_resync":     {"reason": true},
	}
	for name, data := range fixtures(t) {
		if strings.Contains(name, ".") {
			continue
		}
		var fields map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(data, &fields))
		for key := range fields {
			if key == "type" || (optional[key] && !required[name][key]) {
				continue
			}
			without := map[string]json.RawMessage{}
			for k, v := range fields {
				if k != key {
					without[k] = v
				}
			}
			b, _ := json.Marshal(without)
			c, err := helix.UnmarshalChunk(b)
			require.Error(t, err, "%s without %q must be rejected", name, key)
			require.Nil(t, c)
			require.Contains(t, err.Error(), key)
		}
	}
}

func TestChunkBaseIsMutable(t *testing.T) {
	t.Parallel()
	var c helix.Chunk = &helix.ToolStartChunk{ToolCallID: "c", ToolName: "t", Arguments: json.RawMessage(`{}`)}
	b := c.ChunkBase()
	b.AgentID, b.Step = "s-1", 4
	out, err := json.Marshal(c)
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"tool_start","agentId":"s-1","agentType":"","timestamp":0,"step":4,"toolCallId":"c","toolName":"t","arguments":{}}`, string(out))
}

func FuzzUnmarshalChunk(f *testing.F) {
	for _, data := range fixtures(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := helix.UnmarshalChunk(data)
		if err != nil {
			if c != nil {
				t.Fatal("error with a non-nil chunk")
			}
			return
		}
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("marshal decoded chunk: %v", err)
		}
		c2, err := helix.UnmarshalChunk(out)
		if err != nil {
			t.Fatalf("re-decode %s: %v", out, err)
		}
		out2, _ := json.Marshal(c2)
		if string(out) != string(out2) {
			t.Fatalf("not stable:\n%s\n%s", out, out2)
		}
	})
}
