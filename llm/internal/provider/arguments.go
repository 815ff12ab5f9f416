package provider

import (
	"encoding/json"
	"strings"
)

// Arguments returns a tool call's streamed arguments as JSON: {} when
// empty; arguments that are not valid JSON (a model cut off by max_tokens,
// a weak local model) become a JSON string holding the text, so the result
// still checkpoints and the engine's argument validation tells the model.
func Arguments(text string) json.RawMessage {
	trimmed := strings.TrimSpace(text)
	if trimmed == "" {
		return json.RawMessage(`{}`)
	}
	if json.Valid([]byte(trimmed)) {
		return json.RawMessage(trimmed)
	}
	b, _ := json.Marshal(text)
	return b
}
