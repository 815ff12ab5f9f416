package postgres

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	helix "github.com/helix-agents/helix-dbos"
)

// Stream chunks are stored packed (migration 00014): the chunks one
// statement appends to one stream for one run, step and attempt share a row
// of helix.stream_chunks, whose seq is the sequence of its last chunk and n
// its number of chunks (the first is seq - n + 1). A step's six lifecycle
// chunks take two rows instead of six, and a stretch of token deltas one row
// instead of one per delta; readers see the same chunks, byte for byte (see
// unpackRow). A row's body is one of:
//
//   - a marker row, [4, k, ms, "random", common, chunk, ...] (format 4,
//     chunkpack_v4.go): a step commit's row, rendered on read from the
//     checkpoint, messages and session the same commit writes;
//   - a coded row, [3, common, chunk, ...] (format 3, see Coded rows below
//     and chunkpack_v3.go): keys and derived values coded, and what the
//     row's columns or the chunk before give left out;
//   - a chunk's JSON as it is, alone in its row: what no coded row holds
//     byte for byte (see appendRows).
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
}

// packChunks groups consecutive chunks of the same stream, run, step and
// attempt into rows, keeping their order (see appendRows).
func packChunks(chunks []encodedChunk) ([]chunkRow, error) {
	return packChunksWith(chunks, nil)
}

// packChunksWith is packChunks whose rows of marker's run and step are
// marker rows (format 4, chunkpack_v4.go) where one renders back and is
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

func sameRow(a, b encodedChunk) bool {
	return a.streamID == b.streamID && a.runID == b.runID && a.step == b.step && a.attempt == b.attempt
}

// appendRows appends the rows of chunks of one row's run, step and attempt:
// one coded row (packCoded, format 3; for a single chunk only when shorter
// than the chunk) when it reads back byte for byte, else (a chunk with a
// one-character key or a key twice, say, or one with replaced UTF-8) a row
// per chunk as it is, which always reads back.
func appendRows(rows []chunkRow, chunks []encodedChunk) []chunkRow {
	row := func(c encodedChunk, n int, body string) chunkRow {
		return chunkRow{streamID: c.streamID, runID: c.runID, step: c.step, attempt: c.attempt, n: n, body: body}
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
// \ufffd (or c's text holds that escape). A reader of a packed row renders
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

// # Coded rows
//
// A coded row is [3, common, chunk, ...] (format 3; chunkpack_v3.go adds
// what a chunk leaves out of what its row or the chunk before it give): the
// leading 3 tells it from a chunk stored as it is (an object), and every
// object's top-level keys and some values are coded:
//
//   - a key of v2Keys is stored as its one-character code, any other key as
//     it is; chunks with a one-character key of their own are not coded
//     (appendRows writes them as they are), so a one-character key in a
//     coded row is always a code;
//   - a "type" of v2Types is stored as its index, a JSON number, which no
//     type (a JSON string) is;
//   - the derived codes stand for a value rebuilt on read: a runId or stepId
//     that is the row's run, or run and step (rowStepID), a step that is the
//     row's, a checkpointId of the cpv1-{agentId}-s{step}-t{millis}-{random}
//     form with the chunk's own agentId and step (stored as "random", or as
//     [millis - timestamp, "random"]), and a usage object whose keys are a
//     prefix of v2UsageKeys in that order (stored as the array of their
//     values).
//
// Nothing inside a value is rewritten (arguments, results and outputs are
// the user's), except a usage object's own keys. The common object holds
// the coded fields every chunk has with the same bytes; readers merge it
// into each chunk before expanding codes, so a rebuilt checkpointId uses
// the chunk's own agentId, step and timestamp wherever they are stored.
//
// packCoded decodes every row it codes as readers do (decodeCoded) and
// keeps it only when each chunk comes back with exactly its fields and
// value bytes; readers then render each chunk through its type (unpackRow).
// The tables below are part of the stored format: append to them, never
// reorder, remove or rename.

// v2Keys are the codes of the chunk keys helix writes most.
var v2Keys = []struct{ key, code string }{
	{"type", "t"}, {"agentId", "a"}, {"agentType", "A"}, {"timestamp", "m"}, {"step", "s"},
	{"delta", "d"}, {"toolCallId", "c"}, {"toolName", "n"}, {"arguments", "g"}, {"result", "r"},
	{"providerExecuted", "x"}, {"finishReason", "f"}, {"usage", "u"}, {"stepCount", "k"},
	{"checkpointId", "p"}, {"runId", "i"}, {"stepId", "j"}, {"content", "o"}, {"isComplete", "l"},
	{"error", "e"}, {"errorCode", "E"}, {"reason", "y"}, {"output", "O"}, {"approvalId", "v"},
	{"input", "I"}, {"isAutomatic", "M"}, {"approved", "V"}, {"partialInput", "z"},
	{"subAgentType", "b"}, {"subSessionId", "B"}, {"callId", "C"}, {"eventName", "N"},
	{"data", "D"}, {"patches", "h"}, {"recoverable", "q"}, {"errorDetail", "Q"},
	{"streamId", "w"}, {"finalOutput", "W"}, {"messageCount", "G"}, {"fromSequence", "F"},
}

// The derived codes (see Coded rows).
const (
	v2RowRun     = "R" // runId: the row's run
	v2RowStepID  = "J" // stepId: the row's run and step (rowStepID)
	v2RowStep    = "S" // step: the row's step
	v2Checkpoint = "P" // checkpointId: cpv1-{agentId}-s{step}-t{timestamp + delta}-{random}
	v2Usage      = "U" // usage: [inputTokens, outputTokens, ...] in v2UsageKeys order
)

// v2Types are the chunk types a "type" value codes, by index.
var v2Types = []helix.ChunkType{
	helix.ChunkStepStart, helix.ChunkToolStart, helix.ChunkToolEnd, helix.ChunkStepEnd,
	helix.ChunkCheckpointCreated, helix.ChunkStepCommitted, helix.ChunkTextDelta, helix.ChunkThinking,
	helix.ChunkOutput, helix.ChunkError, helix.ChunkToolArgStreamStart, helix.ChunkToolArgStreamDelta,
	helix.ChunkToolArgStreamEnd, helix.ChunkToolApprovalRequest, helix.ChunkToolApprovalResponse,
	helix.ChunkToolInputError, helix.ChunkToolOutputError, helix.ChunkSubAgentStart, helix.ChunkSubAgentEnd,
	helix.ChunkCustom, helix.ChunkStatePatch, helix.ChunkSourceURL, helix.ChunkSourceDocument,
	helix.ChunkFile, helix.ChunkRunInterrupted, helix.ChunkRunResumed, helix.ChunkRunPaused,
	helix.ChunkExecutorSuperseded, helix.ChunkRunQueued, helix.ChunkStepDiscarded,
	helix.ChunkStreamResync, helix.ChunkSuspensionMarker, helix.ChunkStreamEnd,
}

// v2UsageKeys are helix.Usage's keys, quoted, in the order json.Marshal
// writes them.
var v2UsageKeys = [][]byte{[]byte(`"inputTokens"`), []byte(`"outputTokens"`), []byte(`"cachedTokens"`), []byte(`"cacheWriteTokens"`)}

// Quoted keys the derived codes stand for.
var (
	keyType, keyAgentID, keyTimestamp, keyStep   = []byte(`"type"`), []byte(`"agentId"`), []byte(`"timestamp"`), []byte(`"step"`)
	keyRunID, keyStepID, keyCheckpoint, keyUsage = []byte(`"runId"`), []byte(`"stepId"`), []byte(`"checkpointId"`), []byte(`"usage"`)
)

// The tables as lookups, on quoted JSON text, so coding allocates nothing.
var (
	v2Encode   = map[string][]byte{} // `"agentId"` -> `"a"`
	v2Decode   = map[string][]byte{} // `"a"` -> `"agentId"`, and each derived code -> nil
	v2TypeCode = map[string][]byte{} // `"step_start"` -> `0`
	v2TypeName [][]byte              // 0 -> `"step_start"`
	v2Derived  = map[string][]byte{} // "R" -> `"R"`
	zero       = []byte("0")
)

func init() {
	q := func(s string) []byte { return []byte(strconv.Quote(s)) }
	for _, kc := range v2Keys {
		v2Encode[string(q(kc.key))], v2Decode[string(q(kc.code))] = q(kc.code), q(kc.key)
	}
	for _, c := range []string{v2RowRun, v2RowStepID, v2RowStep, v2Checkpoint, v2Usage} {
		v2Derived[c] = q(c)
		v2Decode[string(q(c))] = nil
	}
	if len(v2Decode) != len(v2Keys)+len(v2Derived) {
		panic("postgres: chunk key codes are not unique")
	}
	for i, t := range v2Types {
		v2TypeCode[string(q(string(t)))] = []byte(strconv.Itoa(i))
		v2TypeName = append(v2TypeName, q(string(t)))
	}
}

// member is one member of a JSON object: its key as written (quotes and
// escapes included) and its value's bytes.
type member struct{ key, val []byte }

// codedRow is what coding needs of the row's columns: its run, step and
// stream, as JSON, and its run ID as it is.
type codedRow struct {
	run, stepID, step []byte // run and stepID nil when the row has no run
	stream            []byte
	runID             string
	// marker is a format 4 row's header and sources (nil for a row of
	// format 3).
	marker *markerRow
}

// newCodedRow returns the columns of a row of streamID, runID ("" for
// none) and step, for coding.
func newCodedRow(streamID, runID string, step int) codedRow {
	r := codedRow{step: strconv.AppendInt(nil, int64(step), 10), stream: appendJSONString(nil, streamID), runID: runID}
	if runID != "" {
		r.run = appendJSONString(nil, runID)
		r.stepID = appendJSONString(nil, rowStepID(runID, step))
	}
	return r
}

// rowStepID is the stepId a row's run and step give (steps.StepID's form).
func rowStepID(runID string, step int) string { return fmt.Sprintf("%s:%d", runID, step) }

// packCoded renders chunks of one row as a coded row (format 3), or returns
// false when they cannot be coded or the row would not read back exactly.
func packCoded(chunks []encodedChunk) (string, bool) {
	c0 := chunks[0]
	return packRow(chunks, v3Version, newCodedRow(c0.streamID, c0.runID, c0.step))
}

// packRow is packCoded for row in format version (v3Version, or v4Version
// for a marker row, whose header and sources are row.marker).
func packRow(chunks []encodedChunk, version string, row codedRow) (string, bool) {
	row.marker.reset()
	orig := make([][]member, len(chunks))
	coded := make([][]member, len(chunks))
	size := 8
	for i, c := range chunks {
		fields, ok := objectFields(make([]member, 0, 12), c.raw)
		if !ok {
			return "", false
		}
		for j, f := range fields {
			if len(f.key) == 3 || indexKey(fields[:j], f.key) >= 0 {
				return "", false // a one-character key, or a key twice
			}
		}
		orig[i] = fields
		switch {
		case i == 0:
			coded[i] = codeV3(fields, row, row.marker.first())
		default:
			coded[i] = codeV3(fields, row, orig[i-1])
		}
		row.marker.advance(fields)
		size += len(c.raw)
	}
	// The common fields: those of the first chunk every other has the same
	// (none for a row of one chunk).
	var common []member
	for _, f := range coded[0] {
		shared := len(coded) > 1
		for _, g := range coded[1:] {
			if !hasMember(g, f) {
				shared = false
				break
			}
		}
		if shared {
			common = append(common, f)
		}
	}
	buf := make([]byte, 0, size)
	buf = append(append(append(buf, '['), version...), ',')
	buf = row.marker.appendHeader(buf)
	buf = appendObject(buf, common, nil)
	for _, fields := range coded {
		buf = appendChunkV3(append(buf, ','), fields, common)
	}
	buf = append(buf, ']')
	got, err := decodeCoded(buf, len(chunks), row)
	if err != nil {
		return "", false
	}
	for i := range got {
		if !sameMembers(got[i], orig[i]) {
			return "", false
		}
	}
	return string(buf), true
}

// codeFields returns a chunk's fields with their keys and derived values
// coded (see Coded rows).
func codeFields(fields []member, row codedRow) []member {
	out := make([]member, len(fields))
	for i, f := range fields {
		k, v := f.key, f.val
		out[i] = f
		if c := v2Encode[string(k)]; c != nil {
			out[i].key = c
		}
		switch {
		case bytes.Equal(k, keyRunID) && row.run != nil && bytes.Equal(v, row.run):
			out[i] = member{v2Derived[v2RowRun], zero}
		case bytes.Equal(k, keyStepID) && row.stepID != nil && bytes.Equal(v, row.stepID):
			out[i] = member{v2Derived[v2RowStepID], zero}
		case bytes.Equal(k, keyStep) && bytes.Equal(v, row.step):
			out[i] = member{v2Derived[v2RowStep], zero}
		case bytes.Equal(k, keyType):
			if t := v2TypeCode[string(v)]; t != nil {
				out[i].val = t
			}
		case bytes.Equal(k, keyCheckpoint):
			if cp := codeCheckpoint(fields, v); cp != nil {
				out[i] = member{v2Derived[v2Checkpoint], cp}
			}
		case bytes.Equal(k, keyUsage):
			if u := codeUsage(v); u != nil {
				out[i] = member{v2Derived[v2Usage], u}
			}
		}
	}
	return out
}

// codeCheckpoint returns the coded form of a checkpoint ID its chunk's
// agentId, step and timestamp rebuild ("random", or [delta, "random"]), or
// nil.
func codeCheckpoint(fields []member, v []byte) []byte {
	agent, step, ts, ok := checkpointContext(fields, nil)
	if !ok || len(v) < 2 || v[0] != '"' || bytes.IndexByte(v, '\\') >= 0 {
		return nil
	}
	id := string(v[1 : len(v)-1])
	p, err := helix.ParseCheckpointID(id)
	if err != nil || p.SessionID != agent || p.StepCount != step || string(appendCheckpointID(nil, p)) != id {
		return nil
	}
	random := append(append([]byte{'"'}, p.Random...), '"')
	if p.Timestamp == ts {
		return random
	}
	out := strconv.AppendInt([]byte{'['}, p.Timestamp-ts, 10)
	return append(append(append(out, ','), random...), ']')
}

// appendCheckpointID appends helix.FormatCheckpointID(p) to buf.
func appendCheckpointID(buf []byte, p helix.ParsedCheckpointID) []byte {
	buf = append(append(buf, helix.CheckpointIDPrefix...), p.SessionID...)
	buf = strconv.AppendInt(append(buf, "-s"...), int64(p.StepCount), 10)
	buf = strconv.AppendInt(append(buf, "-t"...), p.Timestamp, 10)
	return append(append(buf, '-'), p.Random...)
}

// checkpointContext reads a chunk's agentId, step and timestamp from its
// (decoded) fields.
func checkpointContext(fields []member, rowStep []byte) (agent string, step int, ts int64, ok bool) {
	var a, s, t []byte
	for _, f := range fields {
		switch {
		case bytes.Equal(f.key, keyAgentID):
			a = f.val
		case bytes.Equal(f.key, keyStep):
			s = f.val
		case bytes.Equal(f.key, keyTimestamp):
			t = f.val
		}
	}
	agent, ok = unquote(a)
	if !ok || s == nil || t == nil {
		return "", 0, 0, false
	}
	step, err1 := strconv.Atoi(string(s))
	ts, err2 := strconv.ParseInt(string(t), 10, 64)
	return agent, step, ts, err1 == nil && err2 == nil
}

// unquote returns the string a JSON string holds.
func unquote(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1]), true
	}
	var s string
	return s, json.Unmarshal(v, &s) == nil
}

// codeUsage returns a usage object whose keys are a prefix of v2UsageKeys,
// in order, as the array of its values, or nil.
func codeUsage(v []byte) []byte {
	var buf [4]member
	fields, ok := objectFields(buf[:0], v)
	if !ok || len(fields) == 0 || len(fields) > len(v2UsageKeys) {
		return nil
	}
	out := make([]byte, 0, len(v))
	for i, f := range fields {
		if !bytes.Equal(f.key, v2UsageKeys[i]) {
			return nil
		}
		out = append(append(out, "[,"[min(i, 1)]), f.val...)
	}
	return append(out, ']')
}

// decodeCoded returns the chunks of a coded row (format 3, or a marker row
// of format 4 with its sources in row.marker) as their fields: the common
// ones merged in, every code expanded, every implied member added.
func decodeCoded(body []byte, n int, row codedRow) ([][]member, error) {
	elems, ok := arrayElems(make([][]byte, 0, n+2+v4HeaderLen), body)
	if !ok || len(elems) == 0 || (string(elems[0]) != v3Version && string(elems[0]) != v4Version) {
		return nil, errors.New("decode coded chunks: not a coded row (format 3 or 4)")
	}
	if string(elems[0]) == v4Version { // format 4 codes chunks as format 3 does
		if row.marker == nil {
			return nil, errors.New("decode coded chunks: a marker row (format 4) read without its sources")
		}
		if len(elems) < 1+v4HeaderLen {
			return nil, errors.New("decode coded chunks: a marker row without its header")
		}
		elems = elems[v4HeaderLen:] // the header was read with the sources (markerSourcesSQL)
	} else if row.marker != nil {
		return nil, errors.New("decode coded chunks: sources given for a row that is not a marker")
	}
	row.marker.reset()
	if len(elems) != n+2 {
		return nil, fmt.Errorf("decode coded chunks: row says %d chunks, holds %d", n, len(elems)-2)
	}
	common, ok := objectFields(nil, elems[1])
	if !ok {
		return nil, errors.New("decode coded chunks: their common fields are not an object")
	}
	out := make([][]member, n)
	for i, e := range elems[2:] {
		var fields []member
		if len(e) > 0 && e[0] != '{' {
			fields = append(make([]member, 0, len(common)+8), member{v3TypeKey, e}) // a chunk of its type alone
		} else if fields, ok = objectFields(make([]member, 0, len(common)+8), e); !ok {
			return nil, fmt.Errorf("decode coded chunk %d: not an object", i+1)
		}
		fields = append(fields, common...)
		prev := row.marker.first()
		if i > 0 {
			prev = out[i-1]
		}
		fields, err := expandV3(fields, row, prev)
		row.marker.advance(fields)
		if err != nil {
			return nil, fmt.Errorf("decode coded chunk %d: %w", i+1, err)
		}
		out[i] = fields
	}
	return out, nil
}

// expandCheckpointAt rebuilds the coded checkpointId at fields[i] from the
// chunk's agentId, step and timestamp, which must be expanded already.
func expandCheckpointAt(fields []member, i int) ([]member, error) {
	v, err := expandCheckpoint(fields, fields[i].val)
	if err != nil {
		return nil, err
	}
	fields[i] = member{keyCheckpoint, v}
	return fields, nil
}

// expandCodes expands every code of a chunk's fields in place but a coded
// checkpointId (built from fields that may come later), whose index it
// returns (-1 for none).
func expandCodes(fields []member, row codedRow) ([]member, int, error) {
	checkpoint := -1
	for i, f := range fields {
		if len(f.key) != 3 {
			continue // a key of the chunk's own
		}
		switch code := string(f.key[1:2]); code {
		case v2RowRun:
			if row.run == nil {
				return nil, -1, errors.New("the runId of a row without a run")
			}
			fields[i] = member{keyRunID, row.run}
		case v2RowStepID:
			if row.run == nil {
				return nil, -1, errors.New("the stepId of a row without a run")
			}
			fields[i] = member{keyStepID, row.stepID}
		case v2RowStep:
			fields[i] = member{keyStep, row.step}
		case v2Checkpoint:
			checkpoint = i // once the fields it is built from are expanded
		case v2Usage:
			u, err := expandUsage(f.val)
			if err != nil {
				return nil, -1, err
			}
			fields[i] = member{keyUsage, u}
		default:
			key := v2Decode[string(f.key)]
			if key == nil {
				return nil, -1, fmt.Errorf("unknown key code %s", f.key)
			}
			fields[i].key = key
			if bytes.Equal(key, keyType) && len(f.val) > 0 && f.val[0] != '"' {
				t, err := strconv.Atoi(string(f.val))
				if err != nil || t < 0 || t >= len(v2TypeName) {
					return nil, -1, fmt.Errorf("unknown type code %s", f.val)
				}
				fields[i].val = v2TypeName[t]
			}
		}
	}
	return fields, checkpoint, nil
}

func expandCheckpoint(fields []member, v []byte) ([]byte, error) {
	agent, step, ts, ok := checkpointContext(fields, nil)
	if !ok {
		return nil, errors.New("a coded checkpointId without agentId, step and timestamp")
	}
	bad := fmt.Errorf("bad coded checkpointId %s", v)
	if d, ok := arrayElems(nil, v); ok {
		delta, err := strconv.ParseInt(string(d[0]), 10, 64)
		if len(d) != 2 || err != nil {
			return nil, bad
		}
		ts, v = ts+delta, d[1]
	}
	random, ok := unquote(v)
	if !ok {
		return nil, bad
	}
	id := appendCheckpointID(nil, helix.ParsedCheckpointID{SessionID: agent, StepCount: step, Timestamp: ts, Random: random})
	return appendJSONString(nil, string(id)), nil
}

func expandUsage(v []byte) ([]byte, error) {
	vals, ok := arrayElems(make([][]byte, 0, len(v2UsageKeys)), v)
	if !ok || len(vals) == 0 || len(vals) > len(v2UsageKeys) {
		return nil, fmt.Errorf("bad coded usage %s", v)
	}
	out := make([]byte, 0, len(v)+16*len(vals))
	for i, x := range vals {
		out = append(append(append(append(out, "{,"[min(i, 1)]), v2UsageKeys[i]...), ':'), x...)
	}
	return append(out, '}'), nil
}

// sameMembers reports whether two objects have the same members, in any
// order; b has no key twice.
func sameMembers(a, b []member) bool {
	if len(a) != len(b) {
		return false
	}
	for _, f := range b {
		if !hasMember(a, f) {
			return false // with len(a) == len(b), a has every member of b, once
		}
	}
	return true
}

func hasMember(fields []member, f member) bool {
	i := indexKey(fields, f.key)
	return i >= 0 && bytes.Equal(fields[i].val, f.val)
}

func indexKey(fields []member, key []byte) int {
	for i, f := range fields {
		if bytes.Equal(f.key, key) {
			return i
		}
	}
	return -1
}

// appendObject appends {fields} to buf, leaving out those of skip.
func appendObject(buf []byte, fields, skip []member) []byte {
	buf = append(buf, '{')
	first := true
	for _, f := range fields {
		if skip != nil && hasMember(skip, f) {
			continue
		}
		if !first {
			buf = append(buf, ',')
		}
		first = false
		buf = append(append(append(buf, f.key...), ':'), f.val...)
	}
	return append(buf, '}')
}

// appendJSONString appends s as json.Marshal writes it.
func appendJSONString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always marshals
			return append(buf, b...)
		}
	}
	return append(append(append(buf, '"'), s...), '"')
}

// objectFields appends the members of the JSON object b to dst. b is valid
// JSON (json.Marshal wrote it, or Postgres checked it); the members' bytes
// are b's.
func objectFields(dst []member, b []byte) ([]member, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	if i = skipSpace(b, i+1); i < len(b) && b[i] == '}' {
		return dst, skipSpace(b, i+1) == len(b)
	}
	for i < len(b) {
		k0 := i
		k1, ok := skipValue(b, k0)
		if !ok || b[k0] != '"' {
			return nil, false
		}
		if i = skipSpace(b, k1); i >= len(b) || b[i] != ':' {
			return nil, false
		}
		v0 := skipSpace(b, i+1)
		v1, ok := skipValue(b, v0)
		if !ok {
			return nil, false
		}
		dst = append(dst, member{b[k0:k1:k1], b[v0:v1:v1]})
		if i = skipSpace(b, v1); i < len(b) && b[i] == '}' {
			return dst, skipSpace(b, i+1) == len(b)
		}
		if i >= len(b) || b[i] != ',' {
			return nil, false
		}
		i = skipSpace(b, i+1)
	}
	return nil, false
}

// arrayElems appends the elements of the JSON array b to dst, as
// objectFields.
func arrayElems(dst [][]byte, b []byte) ([][]byte, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, false
	}
	if i = skipSpace(b, i+1); i < len(b) && b[i] == ']' {
		return dst, skipSpace(b, i+1) == len(b)
	}
	for i < len(b) {
		v1, ok := skipValue(b, i)
		if !ok {
			return nil, false
		}
		dst = append(dst, b[i:v1:v1])
		if i = skipSpace(b, v1); i < len(b) && b[i] == ']' {
			return dst, skipSpace(b, i+1) == len(b)
		}
		if i >= len(b) || b[i] != ',' {
			return nil, false
		}
		i = skipSpace(b, i+1)
	}
	return nil, false
}

// skipValue returns the end of the JSON value at b[i].
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1, true
			}
		}
		return 0, false
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, ok := skipValue(b, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	}
	j := i
	for j < len(b) && !isDelimiter(b[j]) {
		j++
	}
	return j, j > i
}

func isDelimiter(c byte) bool {
	switch c {
	case ',', ':', ']', '}', '[', '{', '"', ' ', '\t', '\r', '\n':
		return true
	}
	return false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}
