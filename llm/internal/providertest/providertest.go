// Package providertest holds the test code the HTTP model adapters
// (llm/openai, llm/anthropic) share and that needs their internals, which
// is why it is not in llm/llmtest: the fuzz harness of their stream
// parsers, which inspects the *provider.Failure a parser returns.
package providertest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/internal/provider"
	"github.com/helix-agents/helix-dbos/llm/llmtest"
)

// ParseFunc reads one response body as an adapter's stream parser does,
// forwarding deltas to cb. forwarded is the parser's own account of
// whether it forwarded anything (what decides whether a failure may be
// retried).
type ParseFunc func(body []byte, cb helix.StreamCallbacks) (res helix.StepResult, forwarded bool, f *provider.Failure)

// FuzzStream fuzzes parse with arbitrary bodies, seeded with the adapter's
// recorded streams (testdata/*.sse, so that `go test` runs them every time)
// and seeds. For every body parse must not panic and must report
// forwarding whenever a callback fired; a failure must be classified (a
// code and a message); a success requires terminator in the body (a
// stream is complete only at its terminal event), must agree with what it
// streamed ([llmtest.CheckStream]), must have tool calls with a name and a
// unique, non-empty ID, and must checkpoint as JSON.
func FuzzStream(f *testing.F, terminator string, parse ParseFunc, seeds ...string) {
	f.Helper()
	files, err := filepath.Glob("testdata/*.sse")
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rec := llmtest.NewRecorder()
		res, forwarded, fail := parse(data, rec.Callbacks())
		if !forwarded && len(rec.Events()) > 0 {
			t.Fatalf("callbacks fired but forwarded is false: %v", rec.Events())
		}
		if fail != nil {
			if fail.Model.Code == "" || fail.Model.Message == "" {
				t.Fatalf("unclassified failure %+v", fail.Model)
			}
			return
		}
		if !bytes.Contains(data, []byte(terminator)) {
			t.Fatalf("success without the %s terminator: %+v", terminator, res)
		}
		llmtest.CheckStream(t, rec, res)
		ids := map[string]bool{}
		for _, c := range res.ToolCalls {
			if c.ID == "" || c.Name == "" || ids[c.ID] {
				t.Fatalf("tool call with an empty or repeated ID or name: %+v", res.ToolCalls)
			}
			ids[c.ID] = true
		}
		if _, err := json.Marshal(res); err != nil {
			t.Fatalf("the result does not checkpoint: %v", err)
		}
	})
}
