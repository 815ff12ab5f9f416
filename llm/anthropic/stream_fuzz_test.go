package anthropic

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/packages/ssestream"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/internal/provider"
	"github.com/helix-agents/helix-dbos/llm/internal/providertest"
)

// streamOf decodes body with the SDK's stream decoder, as GenerateStep
// does with a response.
func streamOf(body []byte) *ssestream.Stream[sdk.MessageStreamEventUnion] {
	res := &http.Response{
		StatusCode: http.StatusOK,
		Header:     http.Header{"Content-Type": {"text/event-stream"}},
		Body:       io.NopCloser(bytes.NewReader(body)),
		Request:    &http.Request{Method: http.MethodPost, URL: &url.URL{Scheme: "https", Host: "api.anthropic.com", Path: "/v1/messages"}},
	}
	return ssestream.NewStream[sdk.MessageStreamEventUnion](ssestream.NewDecoder(res), nil)
}

// FuzzStream feeds arbitrary bodies through the SDK's decoder to the
// accumulator. It must not panic, must never succeed without the
// message_stop event, and a success must be consistent with what it
// streamed and checkpoint as JSON. The recorded fixtures seed it, so `go
// test` runs them every time.
func FuzzStream(f *testing.F) {
	providertest.FuzzStream(f, "message_stop", func(data []byte, cb helix.StreamCallbacks) (helix.StepResult, bool, *provider.Failure) {
		a := &accumulator{cb: cb, apiKey: "sk-ant-fuzz"}
		s := streamOf(data)
		defer func() { _ = s.Close() }()
		res, fail := a.consume(s)
		return res, a.forwarded, fail
	},
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"n\",\"input\":{\"x\":1}}}\n\n"+
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"m\",\"input\":{}}}\n\n"+
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"cut\"}}\n\n"+
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
	)
}
