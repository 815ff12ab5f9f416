// Package statepatch applies RFC 6902 JSON patches to a session's custom
// state with the merge semantics the store promises: operations apply one
// by one, an operation that cannot apply is skipped with a warning, and the
// state always stays a JSON object.
package statepatch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/wI2L/jsondiff"

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

// Diff returns the RFC 6902 operations that turn before into after. An
// element added at the end of an array is expressed as an append ("add" at
// "/path/-") so that appends of parallel tools compose when merged; other
// changes keep their indexes (and so are last-write-wins).
func Diff(before, after json.RawMessage) ([]helix.PatchOp, error) {
	if len(bytes.TrimSpace(before)) == 0 {
		before = json.RawMessage("{}")
	}
	if len(bytes.TrimSpace(after)) == 0 {
		after = json.RawMessage("{}")
	}
	patch, err := jsondiff.CompareJSON(before, after)
	if err != nil {
		return nil, fmt.Errorf("statepatch: diff custom state: %w", err)
	}
	var base any
	if err := json.Unmarshal(before, &base); err != nil {
		return nil, fmt.Errorf("statepatch: decode custom state: %w", err)
	}
	ops := make([]helix.PatchOp, 0, len(patch))
	for _, op := range patch {
		p := helix.PatchOp{Op: op.Type, Path: op.Path, From: op.From}
		if op.Type == "add" || op.Type == "replace" || op.Type == "test" {
			v, err := json.Marshal(op.Value)
			if err != nil {
				return nil, fmt.Errorf("statepatch: encode value at %s: %w", op.Path, err)
			}
			p.Value = v
		}
		if op.Type == "add" {
			p.Path = appendPath(base, op.Path)
		}
		ops = append(ops, p)
	}
	return ops, nil
}

// appendPath rewrites "/a/b/N" to "/a/b/-" when N is the length of the array
// at /a/b in doc (an add at the end).
func appendPath(doc any, path string) string {
	i := strings.LastIndexByte(path, '/')
	if i < 0 {
		return path
	}
	n, err := strconv.Atoi(path[i+1:])
	if err != nil {
		return path
	}
	parent := doc
	if i > 0 {
		for _, tok := range strings.Split(path[1:i], "/") {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			switch v := parent.(type) {
			case map[string]any:
				parent = v[tok]
			case []any:
				k, err := strconv.Atoi(tok)
				if err != nil || k < 0 || k >= len(v) {
					return path
				}
				parent = v[k]
			default:
				return path
			}
		}
	}
	if arr, ok := parent.([]any); ok && n == len(arr) {
		return path[:i] + "/-"
	}
	return path
}
