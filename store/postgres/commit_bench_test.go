package postgres_test

import (
	"encoding/json"
	"fmt"
	"testing"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// BenchmarkCommitStep commits agent steps (an assistant message with a
// tool call, its result, four chunks) to one session: the statement's
// time per step.
func BenchmarkCommitStep(b *testing.B) {
	ctx := b.Context()
	st := newTestStore(b)
	if _, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: "bench", AgentType: "a"}); err != nil {
		b.Fatal(err)
	}
	if _, err := st.CreateRun(ctx, store.CreateRunParams{RunID: "run", SessionID: "bench"}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for step := 1; step <= b.N; step++ {
		base := helix.Base{AgentID: "bench", AgentType: "a", Step: step}
		call := helix.ToolCall{ID: fmt.Sprintf("c%d", step), Name: "noop", Arguments: json.RawMessage(`{}`)}
		_, err := st.CommitStep(ctx, store.StepCommit{SessionID: "bench", RunID: "run", Step: step, AgentType: "a",
			Messages: []helix.Message{helix.AssistantMessage("", call), helix.ToolResultMessage(call.ID, call.Name, `{"ok":true}`)},
			Chunks: []helix.Chunk{&helix.StepStartChunk{Base: base, StepID: fmt.Sprintf("run:%d", step)},
				&helix.ToolEndChunk{Base: base, ToolCallID: call.ID, ToolName: call.Name, Result: json.RawMessage(`{"ok":true}`)},
				&helix.StepEndChunk{Base: base, StepID: fmt.Sprintf("run:%d", step), FinishReason: "tool-calls"}}})
		if err != nil {
			b.Fatal(err)
		}
	}
}
