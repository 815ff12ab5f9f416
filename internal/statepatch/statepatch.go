// Package statepatch applies RFC 6902 JSON patches to a session's custom
// state with the merge semantics the store promises: operations apply one
// by one, an operation that cannot apply is skipped with a warning, and the
// state always stays a JSON object.
package statepatch

import (
	"bytes"
	"encoding/json"
	"fmt"

	jsonpatch "github.com/evanphx/json-patch/v5"

	helix "github.com/helix-agents/helix-dbos"
)

var applyOptions = func() *jsonpatch.ApplyOptions {
	o := jsonpatch.NewApplyOptions()
	o.EnsurePathExistsOnAdd = false
	return o
}()

// Apply applies ops to doc in order and returns the new document and one
// warning per operation that was skipped. A nil or empty doc is treated as
// {}. Appends ("add" at "/path/-") compose with other appends; "replace" is
// last-write-wins in the order given.
func Apply(doc json.RawMessage, ops []helix.PatchOp) (json.RawMessage, []string, error) {
	cur := []byte(doc)
	if len(bytes.TrimSpace(cur)) == 0 || bytes.Equal(bytes.TrimSpace(cur), []byte("null")) {
		cur = []byte("{}")
	}
	if !IsObject(cur) {
		return nil, nil, fmt.Errorf("statepatch: custom state must be a JSON object")
	}
	var warnings []string
	for i, op := range ops {
		one, err := json.Marshal([]helix.PatchOp{op})
		if err != nil {
			return nil, nil, fmt.Errorf("statepatch: encode op %d: %w", i, err)
		}
		patch, err := jsonpatch.DecodePatch(one)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("op %d (%s %s): invalid: %v", i, op.Op, op.Path, err))
			continue
		}
		next, err := patch.ApplyWithOptions(cur, applyOptions)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("op %d (%s %s) skipped: %v", i, op.Op, op.Path, err))
			continue
		}
		if !IsObject(next) {
			warnings = append(warnings, fmt.Sprintf("op %d (%s %s) skipped: custom state must stay a JSON object", i, op.Op, op.Path))
			continue
		}
		cur = next
	}
	return json.RawMessage(cur), warnings, nil
}

// IsObject reports whether doc is a JSON object.
func IsObject(doc []byte) bool {
	doc = bytes.TrimSpace(doc)
	if len(doc) == 0 || doc[0] != '{' {
		return false
	}
	return json.Valid(doc)
}
