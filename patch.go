package helix

import "encoding/json"

// PatchOp is one RFC 6902 JSON Patch operation, as carried by state_patch
// chunks and merged into custom state by the store. Value is kept raw so a
// JSON null value survives (it is distinct from an absent value).
type PatchOp struct {
	Op    string          `json:"op"` // add, remove, replace, move, copy or test
	Path  string          `json:"path"`
	From  string          `json:"from,omitempty"`
	Value json.RawMessage `json:"value,omitempty"`
}
