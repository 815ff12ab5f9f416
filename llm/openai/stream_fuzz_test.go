package openai

import (
	"bytes"
	"testing"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/internal/provider"
	"github.com/helix-agents/helix-dbos/llm/internal/providertest"
)

// FuzzStream feeds arbitrary bodies to the stream parser. It must not
// panic, must never succeed without the [DONE] terminator, and a success
// must be consistent with what it streamed and checkpoint as JSON. The
// recorded fixtures seed it, so `go test` runs them every time.
func FuzzStream(f *testing.F) {
	providertest.FuzzStream(f, "[DONE]", func(data []byte, cb helix.StreamCallbacks) (helix.StepResult, bool, *provider.Failure) {
		s := &stream{cb: cb, endpoint: "http://fuzz", apiKey: "sk-fuzz"}
		res, fail := s.read(bytes.NewReader(data))
		return res, s.forwarded, fail
	},
		"data: [DONE]",
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"arguments\":\"{}\"}}]}}]}\n\ndata: [DONE]\n\n",
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"a\",\"function\":{\"name\":\"x\"}},{\"id\":\"a\",\"index\":3,\"function\":{\"name\":\"y\",\"arguments\":{\"k\":1}}}]}}]}\r\n\r\ndata: [DONE]\r\n\r\n",
	)
}
