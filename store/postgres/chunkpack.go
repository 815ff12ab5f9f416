package postgres

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

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
// one, else [common fields, chunk without them, ...].
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
	parts := make([]any, 0, len(chunks)+1)
	parts = append(parts, common)
	for _, f := range fields {
		for k := range common {
			delete(f, k)
		}
		parts = append(parts, f)
	}
	b, err := json.Marshal(parts)
	if err != nil {
		return "", fmt.Errorf("pack chunks: %w", err)
	}
	return string(b), nil
}

// unpackRow returns the chunks of a row written with packBody (or before
// packing), as the raw JSON they were appended with: json.Marshal of the
// decoded chunk, which is how encodeChunk wrote them.
func unpackRow(body []byte, n int) ([]helix.Chunk, [][]byte, error) {
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
	common := bytes.TrimSpace(parts[0])
	chunks, raws := make([]helix.Chunk, 0, n), make([][]byte, 0, n)
	for _, p := range parts[1:] {
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
