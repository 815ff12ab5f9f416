package postgres

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// Stream chunks are stored packed: the chunks one
// statement appends to one stream for one run, step and attempt share a row
// of helix.stream_chunks, whose seq is the sequence of its last chunk and n
// its number of chunks (the first is seq - n + 1). A step's six lifecycle
// chunks take two rows instead of six, and a stretch of token deltas one row
// instead of one per delta; readers see the same chunks, byte for byte (see
// unpackRow). A row's body is one of:
//
//   - a marker row, [4, k, ms, "random", common, chunk, ...] (format 4,
//     chunk_marker.go): a step commit's row, rendered on read from the
//     checkpoint, messages and session the same commit writes;
//   - a coded row, [3, common, chunk, ...] (format 3, chunk_coded.go): keys
//     and derived values coded, and what the row's columns or the chunk
//     before give left out (chunk_implied.go);
//   - a chunk's JSON as it is, alone in its row: what no coded row holds
//     byte for byte (see appendRows).
//
// Writers write the first that reads back (packChunksWith), readers read
// exactly these three (unpackRow, unpackRowWith). The JSON is scanned
// without decoding it (jsonscan.go).
//
// The leading number tells the formats apart (a chunk's JSON is an
// object). SQL cannot look inside a coded row (its chunks have no "type"
// key): read chunks through the store.

// chunkRow is one row of helix.stream_chunks, ready to insert.
type chunkRow struct {
	streamID string
	runID    string
	step     int
	attempt  int
	n        int
	body     string
	fence    store.Fence // zero: none
}

// packChunks groups consecutive chunks of the same stream, run, step and
// attempt into rows, keeping their order (see appendRows).
func packChunks(chunks []encodedChunk) ([]chunkRow, error) {
	return packChunksWith(chunks, nil)
}

// packChunksWith is packChunks whose rows of marker's run and step are
// marker rows (format 4, chunk_marker.go) where one renders back and is
// shorter (marker nil: none).
func packChunksWith(chunks []encodedChunk, marker *markerWrite) ([]chunkRow, error) {
	var rows []chunkRow
	for i := 0; i < len(chunks); {
		j := i + 1
		for j < len(chunks) && sameRow(chunks[i], chunks[j]) {
			j++
		}
		n := len(rows)
		rows = appendRows(rows, chunks[i:j])
		if marker != nil && len(rows) == n+1 {
			if body, ok := packMarker(chunks[i:j], marker, rows[n].body); ok {
				rows[n].body = body
			}
		}
		i = j
	}
	return rows, nil
}

// sameRow reports whether a and b go in one row: the same stream, run,
// step, attempt and fence.
func sameRow(a, b encodedChunk) bool {
	return a.streamID == b.streamID && a.runID == b.runID && a.step == b.step && a.attempt == b.attempt && a.fence == b.fence
}

// appendRows appends the rows of chunks of one row's run, step and attempt:
// one coded row (packCoded, format 3; for a single chunk only when shorter
// than the chunk) when it reads back byte for byte, else (a chunk with a
// one-character key or a key twice, say, or one with replaced UTF-8) a row
// per chunk as it is, which always reads back.
func appendRows(rows []chunkRow, chunks []encodedChunk) []chunkRow {
	row := func(c encodedChunk, n int, body string) chunkRow {
		return chunkRow{streamID: c.streamID, runID: c.runID, step: c.step, attempt: c.attempt, n: n, body: body, fence: c.fence}
	}
	if slices.ContainsFunc(chunks, replacedUTF8) {
		return appendSingles(rows, chunks, row)
	}
	if body, ok := packCoded(chunks); ok && (len(chunks) > 1 || len(body) < len(chunks[0].raw)) {
		return append(rows, row(chunks[0], len(chunks), body))
	}
	return appendSingles(rows, chunks, row)
}

// appendSingles appends a row per chunk, each as it is.
func appendSingles(rows []chunkRow, chunks []encodedChunk, row func(encodedChunk, int, string) chunkRow) []chunkRow {
	for _, c := range chunks {
		rows = append(rows, row(c, 1, string(c.raw)))
	}
	return rows
}

// replacedUTF8 reports whether json.Marshal replaced invalid UTF-8 in c by
// \ufffd (or c's text holds that escape). A reader of a coded row renders
// each chunk again through its type (unpackRow), which writes U+FFFD as
// itself, not as \ufffd; every other escape json.Marshal writes it writes
// the same again, and json.RawMessage values are kept as they are. So such
// a chunk gets a row of its own, whose body is returned as it is. (Checking
// every row by decoding its chunks, as readers do, would cost four times
// what packing does.)
func replacedUTF8(c encodedChunk) bool { return bytes.Contains(c.raw, []byte(`\ufffd`)) }

// unpackRow returns the chunks of a row written with packChunks (coded, or
// a chunk as it is), as the raw JSON they were appended with: json.Marshal
// of the decoded chunk, which is how encodeChunk wrote them. streamID, runID
// and step are the row's. A marker row needs its sources (unpackRowWith).
func unpackRow(body []byte, n int, streamID, runID string, step int) ([]helix.Chunk, [][]byte, error) {
	if isCoded(body) {
		return unpackCoded(body, n, newCodedRow(streamID, runID, step))
	}
	if n != 1 || bytes.HasPrefix(body, []byte("[")) {
		return nil, nil, fmt.Errorf("decode chunks: a row of %d chunks neither coded (format 3 or 4) nor a chunk's JSON", n)
	}
	c, err := helix.UnmarshalChunk(body)
	if err != nil {
		return nil, nil, err
	}
	return []helix.Chunk{c}, [][]byte{body}, nil
}

// unpackRowWith is unpackRow for a row whose marker sources are src (nil
// for a row that is not a marker).
func unpackRowWith(body []byte, n int, streamID, runID string, step int, src *markerRow) ([]helix.Chunk, [][]byte, error) {
	if src == nil {
		return unpackRow(body, n, streamID, runID, step)
	}
	if !isMarker(body) {
		return nil, nil, errors.New("decode chunks: sources given for a row that is not a marker")
	}
	row := newCodedRow(streamID, runID, step)
	row.marker = src
	return unpackCoded(body, n, row)
}

// isCoded reports whether a row's body is a coded row (format 3) or a
// marker row (format 4); any other body is a chunk as it is, an object.
func isCoded(body []byte) bool {
	return bytes.HasPrefix(body, []byte("["+v3Version+",")) || isMarker(body)
}

// unpackCoded returns the chunks of a coded row (see Coded rows) and their
// raw JSON, as unpackRow.
func unpackCoded(body []byte, n int, row codedRow) ([]helix.Chunk, [][]byte, error) {
	objects, err := decodeCoded(body, n, row)
	if err != nil {
		return nil, nil, err
	}
	chunks, raws := make([]helix.Chunk, 0, n), make([][]byte, 0, n)
	var buf []byte
	for _, fields := range objects {
		buf = appendObject(buf[:0], fields, nil)
		c, raw, err := renderChunk(buf)
		if err != nil {
			return nil, nil, err
		}
		chunks, raws = append(chunks, c), append(raws, raw)
	}
	return chunks, raws, nil
}

// renderChunk decodes one chunk's fields and renders it through its type,
// as encodeChunk did when it was written.
func renderChunk(fields []byte) (helix.Chunk, []byte, error) {
	c, err := helix.UnmarshalChunk(fields)
	if err != nil {
		return nil, nil, err
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, nil, fmt.Errorf("encode %s chunk: %w", c.ChunkType(), err)
	}
	return c, raw, nil
}
