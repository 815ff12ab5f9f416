package postgres

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	helix "github.com/helix-agents/helix-dbos"
)

// Stream chunks are stored packed (migration 00014): the chunks one
// statement appends to one stream for one run, step and attempt share a row
// of helix.stream_chunks, whose seq is the sequence of its last chunk and n
// its number of chunks (the first is seq - n + 1). A row of one chunk holds
// that chunk's JSON, as rows did before packing. A row of several holds a
// JSON array: first the fields every one of its chunks has with the same
// value (agentId, agentType, step, often runId, stepId and timestamp), then
// each chunk without them. A step's six lifecycle chunks take two rows
// instead of six, and a stretch of token deltas one row instead of one per
// delta; readers see the same chunks, byte for byte (see unpackRow).

// chunkRow is one row of helix.stream_chunks, ready to insert.
type chunkRow struct {
	streamID string
	runID    string
	step     int
	attempt  int
	n        int
	body     string
}

// packChunks groups consecutive chunks of the same stream, run, step and
// attempt into rows, keeping their order.
func packChunks(chunks []encodedChunk) ([]chunkRow, error) {
	var rows []chunkRow
	for i := 0; i < len(chunks); {
		j := i + 1
		for j < len(chunks) && sameRow(chunks[i], chunks[j]) {
			j++
		}
		body, err := packBody(chunks[i:j])
		if err != nil {
			return nil, err
		}
		c := chunks[i]
		rows = append(rows, chunkRow{streamID: c.streamID, runID: c.runID, step: c.step, attempt: c.attempt, n: j - i, body: body})
		i = j
	}
	return rows, nil
}

func sameRow(a, b encodedChunk) bool {
	return a.streamID == b.streamID && a.runID == b.runID && a.step == b.step && a.attempt == b.attempt
}

// packBody renders chunks as one row's body: the chunk itself when there is
// one, else [common fields, chunk without them, ...], compacted
// (compactRow). Both read back byte for byte by construction: a field is
// left out only where its exact bytes come back (from the row's run and
// step, or from the first element), and readers render every chunk
// through its type, as encodeChunk did.
func packBody(chunks []encodedChunk) (string, error) {
	if len(chunks) == 1 {
		return string(chunks[0].raw), nil
	}
	fields := make([]map[string]json.RawMessage, len(chunks))
	for i, c := range chunks {
		if err := json.Unmarshal(c.raw, &fields[i]); err != nil {
			return "", fmt.Errorf("pack chunk: %w", err)
		}
	}
	common := map[string]json.RawMessage{}
	for k, v := range fields[0] {
		if k == "type" {
			continue // kept in each chunk: readers and SQL look for it there
		}
		shared := true
		for _, f := range fields[1:] {
			if w, ok := f[k]; !ok || !bytes.Equal(v, w) {
				shared = false
				break
			}
		}
		if shared {
			common[k] = v
		}
	}
	for _, f := range fields {
		for k := range common {
			delete(f, k)
		}
	}
	compact, err := compactRow(common, fields, chunks[0].runID, chunks[0].step)
	if err != nil || compact != "" {
		return compact, err
	}
	return renderRow(common, fields)
}

func renderRow(common map[string]json.RawMessage, fields []map[string]json.RawMessage) (string, error) {
	parts := make([]any, 0, len(fields)+1)
	parts = append(parts, common)
	for _, f := range fields {
		parts = append(parts, f)
	}
	b, err := json.Marshal(parts)
	if err != nil {
		return "", fmt.Errorf("pack chunks: %w", err)
	}
	return string(b), nil
}

// compactKey is the reserved key of a packed row's compaction: in the
// common object, the [key, value] pairs some of the chunks share; in a
// chunk, what it takes back: "r" its runId (the row's run), "s" its stepId
// (the row's run and step), a digit a shared pair. No chunk field is "~".
const compactKey = "~"

// A pair of key and value is stored once when two or more chunks of a row
// have it and it is at least minSharedPair bytes long; a row stores at most
// maxSharedPairs (the flags name them by one digit).
const (
	minSharedPair  = 24
	maxSharedPairs = 10
)

// rowStepID is the stepId a row's run and step give (steps.StepID's form).
func rowStepID(runID string, step int) string { return fmt.Sprintf("%s:%d", runID, step) }

// compactRow removes from each chunk (already without the common fields)
// the fields the row's run and step give (runId, stepId) and those two or
// more chunks share with the same value (a step's checkpointId), and
// returns the row's body, or "" when there is nothing to remove.
func compactRow(common map[string]json.RawMessage, fields []map[string]json.RawMessage, runID string, step int) (string, error) {
	runJSON, err := json.Marshal(runID)
	if err != nil {
		return "", err
	}
	stepJSON, err := json.Marshal(rowStepID(runID, step))
	if err != nil {
		return "", err
	}
	// Pairs shared by at least two chunks and worth storing once, in a
	// fixed order.
	seen := map[[2]string]int{}
	for _, f := range fields {
		for k, v := range f {
			if k != "type" && k != "runId" && k != "stepId" {
				seen[[2]string{k, string(v)}]++
			}
		}
	}
	var shared [][2]string
	for kv, n := range seen {
		if n > 1 && len(kv[0])+len(kv[1]) >= minSharedPair {
			shared = append(shared, kv)
		}
	}
	slices.SortFunc(shared, func(a, b [2]string) int { return strings.Compare(a[0]+a[1], b[0]+b[1]) })
	shared = shared[:min(len(shared), maxSharedPairs)]
	removed := false
	out := make([]map[string]json.RawMessage, len(fields))
	for i, f := range fields {
		g := maps.Clone(f)
		var flags strings.Builder
		if v, ok := g["runId"]; ok && runID != "" && bytes.Equal(v, runJSON) {
			delete(g, "runId")
			flags.WriteByte('r')
		}
		if v, ok := g["stepId"]; ok && runID != "" && bytes.Equal(v, stepJSON) {
			delete(g, "stepId")
			flags.WriteByte('s')
		}
		for j, kv := range shared {
			if v, ok := g[kv[0]]; ok && string(v) == kv[1] {
				delete(g, kv[0])
				flags.WriteByte(byte('0' + j))
			}
		}
		if flags.Len() > 0 {
			removed = true
			fl, err := json.Marshal(flags.String())
			if err != nil {
				return "", err
			}
			g[compactKey] = fl
		}
		out[i] = g
	}
	if !removed {
		return "", nil
	}
	c := maps.Clone(common)
	if len(shared) > 0 {
		pairs := make([][2]json.RawMessage, len(shared))
		for i, kv := range shared {
			k, err := json.Marshal(kv[0])
			if err != nil {
				return "", err
			}
			pairs[i] = [2]json.RawMessage{k, json.RawMessage(kv[1])}
		}
		pv, err := json.Marshal(pairs)
		if err != nil {
			return "", err
		}
		c[compactKey] = pv
	}
	return renderRow(c, out)
}

// unpackRow returns the chunks of a row written with packBody (or before
// packing), as the raw JSON they were appended with: json.Marshal of the
// decoded chunk, which is how encodeChunk wrote them. runID and step are
// the row's.
func unpackRow(body []byte, n int, runID string, step int) ([]helix.Chunk, [][]byte, error) {
	if n <= 1 {
		c, err := helix.UnmarshalChunk(body)
		if err != nil {
			return nil, nil, err
		}
		return []helix.Chunk{c}, [][]byte{body}, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(body, &parts); err != nil {
		return nil, nil, fmt.Errorf("decode packed chunks: %w", err)
	}
	if len(parts) != n+1 {
		return nil, nil, fmt.Errorf("decode packed chunks: row says %d chunks, holds %d", n, len(parts)-1)
	}
	common, shared, err := splitCommon(parts[0])
	if err != nil {
		return nil, nil, err
	}
	chunks, raws := make([]helix.Chunk, 0, n), make([][]byte, 0, n)
	for _, p := range parts[1:] {
		p, err := expand(p, shared, runID, step)
		if err != nil {
			return nil, nil, err
		}
		c, err := helix.UnmarshalChunk(mergeObjects(p, common))
		if err != nil {
			return nil, nil, err
		}
		raw, err := json.Marshal(c)
		if err != nil {
			return nil, nil, fmt.Errorf("encode %s chunk: %w", c.ChunkType(), err)
		}
		chunks, raws = append(chunks, c), append(raws, raw)
	}
	return chunks, raws, nil
}

// splitCommon returns a packed row's common fields without the shared
// pairs of a compacted row, and those pairs.
func splitCommon(raw json.RawMessage) (json.RawMessage, [][2]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if !bytes.Contains(raw, []byte(`"~"`)) {
		return raw, nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, fmt.Errorf("decode packed chunks: %w", err)
	}
	var shared [][2]json.RawMessage
	if v, ok := m[compactKey]; ok {
		if err := json.Unmarshal(v, &shared); err != nil {
			return nil, nil, fmt.Errorf("decode packed chunks' shared fields: %w", err)
		}
		delete(m, compactKey)
	}
	b, err := json.Marshal(m)
	return b, shared, err
}

// expand gives a compacted chunk back the fields its flags name.
func expand(p json.RawMessage, shared [][2]json.RawMessage, runID string, step int) (json.RawMessage, error) {
	if !bytes.Contains(p, []byte(`"~"`)) {
		return p, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(p, &m); err != nil {
		return nil, fmt.Errorf("decode packed chunk: %w", err)
	}
	raw, ok := m[compactKey]
	if !ok {
		return p, nil // "~" was in a value
	}
	var flags string
	if err := json.Unmarshal(raw, &flags); err != nil {
		return nil, fmt.Errorf("decode packed chunk's flags: %w", err)
	}
	delete(m, compactKey)
	for _, f := range flags {
		var err error
		switch {
		case f == 'r':
			m["runId"], err = json.Marshal(runID)
		case f == 's':
			m["stepId"], err = json.Marshal(rowStepID(runID, step))
		case f >= '0' && int(f-'0') < len(shared):
			var k string
			if err = json.Unmarshal(shared[f-'0'][0], &k); err == nil {
				m[k] = shared[f-'0'][1]
			}
		default:
			err = fmt.Errorf("unknown flag %q", f)
		}
		if err != nil {
			return nil, fmt.Errorf("decode packed chunk: %w", err)
		}
	}
	return json.Marshal(m)
}

// mergeObjects joins two JSON objects without common keys into one.
func mergeObjects(a, b []byte) []byte {
	a, b = bytes.TrimSpace(a), bytes.TrimSpace(b)
	if len(b) <= 2 {
		return a
	}
	if len(a) <= 2 {
		return b
	}
	out := slices.Grow(slices.Clip(a[:len(a)-1]), len(b))
	out = append(out, ',')
	return append(out, b[1:]...)
}
