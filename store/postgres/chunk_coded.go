package postgres

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	helix "github.com/helix-agents/helix-dbos"
)

// # Coded rows (format 3)
//
// A coded row is [3, common, chunk, ...]: the leading 3 tells it from a
// chunk stored as it is (an object) and from a marker row (format 4,
// chunk_marker.go, which codes its chunks the same way). Every object's
// top-level keys and some values are coded:
//
//   - a key of keyCodes is stored as its one-character code, any other key
//     as it is; chunks with a one-character key of their own are not coded
//     (appendRows writes them as they are), so a one-character key in a
//     coded row is always a code;
//   - a "type" of codedTypes is stored as its index, a JSON number, which no
//     type (a JSON string) is;
//   - the derived codes stand for a value rebuilt on read: a runId or stepId
//     that is the row's run, or run and step (rowStepID), a step that is the
//     row's, a checkpointId of the cpv1-{agentId}-s{step}-t{millis}-{random}
//     form with the chunk's own agentId and step (stored as "random", or as
//     [millis - timestamp, "random"]), and a usage object whose keys are a
//     prefix of usageKeys in that order (stored as the array of their
//     values).
//
// A chunk also leaves out what its row or the chunk before it gives:
//
//   - implied members (chunk_implied.go): the members its type implies
//     whose value is the one the row or the chunk before gives; one the
//     type implies that the chunk does not have is named, by its key's code,
//     in the chunk's "-" string; one with another value is stored, coded;
//   - "T": a timestamp that is not the one of the chunk before, stored as
//     its difference to it;
//   - a chunk left with its type alone is stored as the type's number.
//
// Nothing inside a value is rewritten (arguments, results and outputs are
// the user's), except a usage object's own keys. The common object holds
// the coded fields every chunk has with the same bytes (none for a row of
// one chunk); readers merge it into each chunk before expanding codes, so a
// rebuilt checkpointId uses the chunk's own agentId, step and timestamp
// wherever they are stored. A row of one chunk is coded too when that is
// shorter than the chunk.
//
// packCoded decodes every row it codes as readers do (decodeCoded) and
// keeps it only when each chunk comes back with exactly its fields and
// value bytes; readers then render each chunk through its type (unpackRow).
// The tables below are part of the stored format: append to them, never
// reorder, remove or rename.

// v3Version is the first element of a coded row (format 3).
const v3Version = "3"

// keyCodes are the codes of the chunk keys helix writes most.
var keyCodes = []struct{ key, code string }{
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
	derivedRun        = "R" // runId: the row's run
	derivedStepID     = "J" // stepId: the row's run and step (rowStepID)
	derivedStep       = "S" // step: the row's step
	derivedCheckpoint = "P" // checkpointId: cpv1-{agentId}-s{step}-t{timestamp + delta}-{random}
	derivedUsage      = "U" // usage: [inputTokens, outputTokens, ...] in usageKeys order
)

// codedTypes are the chunk types a "type" value codes, by index.
var codedTypes = []helix.ChunkType{
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

// usageKeys are helix.Usage's keys, quoted, in the order json.Marshal
// writes them.
var usageKeys = [][]byte{[]byte(`"inputTokens"`), []byte(`"outputTokens"`), []byte(`"cachedTokens"`), []byte(`"cacheWriteTokens"`)}

// Keys of coded rows of their own: a chunk's implied members it does not
// have, its timestamp as a difference to the one of the chunk before, and
// its type's code.
var (
	keyAbsent   = []byte(`"-"`)
	keyDelta    = []byte(`"T"`)
	keyTypeCode = []byte(`"t"`)
)

// Quoted keys the derived codes stand for.
var (
	keyType, keyAgentID, keyTimestamp, keyStep   = []byte(`"type"`), []byte(`"agentId"`), []byte(`"timestamp"`), []byte(`"step"`)
	keyRunID, keyStepID, keyCheckpoint, keyUsage = []byte(`"runId"`), []byte(`"stepId"`), []byte(`"checkpointId"`), []byte(`"usage"`)
)

// The tables as lookups, on quoted JSON text, so coding allocates nothing.
var (
	keyEncode   = map[string][]byte{} // `"agentId"` -> `"a"`
	keyDecode   = map[string][]byte{} // `"a"` -> `"agentId"`, and each derived code -> nil
	typeNumber  = map[string][]byte{} // `"step_start"` -> `0`
	typeName    [][]byte              // 0 -> `"step_start"`
	derivedKeys = map[string][]byte{} // "R" -> `"R"`
	zero        = []byte("0")
)

// init fills the lookups from the tables, and fails when two keys or
// derived codes share a code.
func init() {
	q := func(s string) []byte { return []byte(strconv.Quote(s)) }
	for _, kc := range keyCodes {
		keyEncode[string(q(kc.key))], keyDecode[string(q(kc.code))] = q(kc.code), q(kc.key)
	}
	for _, c := range []string{derivedRun, derivedStepID, derivedStep, derivedCheckpoint, derivedUsage} {
		derivedKeys[c] = q(c)
		keyDecode[string(q(c))] = nil
	}
	if len(keyDecode) != len(keyCodes)+len(derivedKeys) {
		panic("postgres: chunk key codes are not unique")
	}
	for i, t := range codedTypes {
		typeNumber[string(q(string(t)))] = []byte(strconv.Itoa(i))
		typeName = append(typeName, q(string(t)))
	}
}

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
		prev := row.marker.first()
		if i > 0 {
			prev = orig[i-1]
		}
		coded[i] = codeChunk(fields, row, prev)
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
		buf = appendCodedChunk(append(buf, ','), fields, common)
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

// codeChunk returns a chunk's fields as a coded row holds them: coded, less
// the implied members (its row's implied), its timestamp as a difference;
// prev are the fields of the chunk before it in the row (for the first,
// row.marker.first()).
func codeChunk(fields []member, row codedRow, prev []member) []member {
	drop := make([]bool, len(fields))
	var absent []byte
	for _, im := range row.implied(valueOf(fields, keyType)) {
		v := im.value(row, prev, fields)
		if v == nil {
			continue
		}
		switch j := indexKey(fields, im.key); {
		case j < 0:
			absent = append(absent, im.code)
		case bytes.Equal(fields[j].val, v):
			drop[j] = true
		}
	}
	coded := codeFields(fields, row)
	out := make([]member, 0, len(fields)+1)
	for j, f := range coded {
		if drop[j] {
			continue
		}
		if bytes.Equal(fields[j].key, keyTimestamp) {
			if d := timestampDelta(valueOf(prev, keyTimestamp), f.val); d != nil {
				f = member{keyDelta, d}
			}
		}
		out = append(out, f)
	}
	if absent != nil {
		out = append(out, member{keyAbsent, append(append([]byte{'"'}, absent...), '"')})
	}
	return out
}

// codeFields returns a chunk's fields with their keys and derived values
// coded (see Coded rows).
func codeFields(fields []member, row codedRow) []member {
	out := make([]member, len(fields))
	for i, f := range fields {
		k, v := f.key, f.val
		out[i] = f
		if c := keyEncode[string(k)]; c != nil {
			out[i].key = c
		}
		switch {
		case bytes.Equal(k, keyRunID) && row.run != nil && bytes.Equal(v, row.run):
			out[i] = member{derivedKeys[derivedRun], zero}
		case bytes.Equal(k, keyStepID) && row.stepID != nil && bytes.Equal(v, row.stepID):
			out[i] = member{derivedKeys[derivedStepID], zero}
		case bytes.Equal(k, keyStep) && bytes.Equal(v, row.step):
			out[i] = member{derivedKeys[derivedStep], zero}
		case bytes.Equal(k, keyType):
			if t := typeNumber[string(v)]; t != nil {
				out[i].val = t
			}
		case bytes.Equal(k, keyCheckpoint):
			if cp := codeCheckpoint(fields, v); cp != nil {
				out[i] = member{derivedKeys[derivedCheckpoint], cp}
			}
		case bytes.Equal(k, keyUsage):
			if u := codeUsage(v); u != nil {
				out[i] = member{derivedKeys[derivedUsage], u}
			}
		}
	}
	return out
}

// codeCheckpoint returns the coded form of a checkpoint ID its chunk's
// agentId, step and timestamp rebuild ("random", or [delta, "random"]), or
// nil.
func codeCheckpoint(fields []member, v []byte) []byte {
	agent, step, ts, ok := checkpointContext(fields)
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
func checkpointContext(fields []member) (agent string, step int, ts int64, ok bool) {
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

// codeUsage returns a usage object whose keys are a prefix of usageKeys,
// in order, as the array of its values, or nil.
func codeUsage(v []byte) []byte {
	var buf [4]member
	fields, ok := objectFields(buf[:0], v)
	if !ok || len(fields) == 0 || len(fields) > len(usageKeys) {
		return nil
	}
	out := make([]byte, 0, len(v))
	for i, f := range fields {
		if !bytes.Equal(f.key, usageKeys[i]) {
			return nil
		}
		out = append(append(out, "[,"[min(i, 1)]), f.val...)
	}
	return append(out, ']')
}

// timestampDelta returns ts - prev, when both are integers as json.Marshal
// writes them, or nil.
func timestampDelta(prev, ts []byte) []byte {
	p, ok1 := jsonInt(prev)
	t, ok2 := jsonInt(ts)
	if !ok1 || !ok2 {
		return nil
	}
	return strconv.AppendInt(nil, t-p, 10)
}

// jsonInt returns the integer v holds when it is written as
// strconv.AppendInt writes it.
func jsonInt(v []byte) (int64, bool) {
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil && string(strconv.AppendInt(nil, n, 10)) == string(v)
}

// appendCodedChunk appends a chunk's coded fields less the common ones, as its
// type's number when that is all it has.
func appendCodedChunk(buf []byte, fields, common []member) []byte {
	var only []byte
	n := 0
	for _, f := range fields {
		if !hasMember(common, f) {
			n++
			if bytes.Equal(f.key, keyTypeCode) && len(f.val) > 0 && f.val[0] != '"' {
				only = f.val
			}
		}
	}
	if n == 1 && only != nil {
		return append(buf, only...)
	}
	return appendObject(buf, fields, common)
}

// decodeCoded returns the chunks of a coded row (format 3, or a marker row
// of format 4 with its sources in row.marker) as their fields: the common
// ones merged in, every code expanded, every implied member added.
func decodeCoded(body []byte, n int, row codedRow) ([][]member, error) {
	elems, ok := arrayElems(make([][]byte, 0, n+2+markerHeaderLen), body)
	if !ok || len(elems) == 0 || (string(elems[0]) != v3Version && string(elems[0]) != v4Version) {
		return nil, errors.New("decode coded chunks: not a coded row (format 3 or 4)")
	}
	if string(elems[0]) == v4Version { // format 4 codes chunks as format 3 does
		if row.marker == nil {
			return nil, errors.New("decode coded chunks: a marker row (format 4) read without its sources")
		}
		if len(elems) < 1+markerHeaderLen {
			return nil, errors.New("decode coded chunks: a marker row without its header")
		}
		elems = elems[markerHeaderLen:] // the header was read with the sources (markerSourcesSQL)
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
			fields = append(make([]member, 0, len(common)+8), member{keyTypeCode, e}) // a chunk of its type alone
		} else if fields, ok = objectFields(make([]member, 0, len(common)+8), e); !ok {
			return nil, fmt.Errorf("decode coded chunk %d: not an object", i+1)
		}
		fields = append(fields, common...)
		prev := row.marker.first()
		if i > 0 {
			prev = out[i-1]
		}
		fields, err := expandChunk(fields, row, prev)
		row.marker.advance(fields)
		if err != nil {
			return nil, fmt.Errorf("decode coded chunk %d: %w", i+1, err)
		}
		out[i] = fields
	}
	return out, nil
}

// expandChunk gives a coded chunk's fields (common ones merged in) back
// their keys and values and adds the members its type implies; prev are
// the decoded fields of the chunk before it (for the first,
// row.marker.first()).
func expandChunk(fields []member, row codedRow, prev []member) ([]member, error) {
	var absent, delta []byte
	kept := fields[:0]
	for _, f := range fields {
		switch {
		case bytes.Equal(f.key, keyAbsent):
			absent = f.val
		case bytes.Equal(f.key, keyDelta):
			delta = f.val
		default:
			kept = append(kept, f)
		}
	}
	fields, checkpoint, err := expandCodes(kept, row)
	if err != nil {
		return nil, err
	}
	if delta != nil {
		p, ok1 := jsonInt(valueOf(prev, keyTimestamp))
		d, ok2 := jsonInt(delta)
		if !ok1 || !ok2 || indexKey(fields, keyTimestamp) >= 0 {
			return nil, fmt.Errorf("bad timestamp difference %s", delta)
		}
		fields = append(fields, member{keyTimestamp, strconv.AppendInt(nil, p+d, 10)})
	}
	for _, im := range row.implied(valueOf(fields, keyType)) {
		if indexKey(fields, im.key) >= 0 || bytes.IndexByte(absent, im.code) >= 0 ||
			(checkpoint >= 0 && bytes.Equal(im.key, keyCheckpoint)) { // held coded
			continue
		}
		if v := im.value(row, prev, fields); v != nil {
			fields = append(fields, member{im.key, v})
		}
	}
	if checkpoint < 0 {
		return fields, nil
	}
	return expandCheckpointAt(fields, checkpoint)
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
		case derivedRun:
			if row.run == nil {
				return nil, -1, errors.New("the runId of a row without a run")
			}
			fields[i] = member{keyRunID, row.run}
		case derivedStepID:
			if row.run == nil {
				return nil, -1, errors.New("the stepId of a row without a run")
			}
			fields[i] = member{keyStepID, row.stepID}
		case derivedStep:
			fields[i] = member{keyStep, row.step}
		case derivedCheckpoint:
			checkpoint = i // once the fields it is built from are expanded
		case derivedUsage:
			u, err := expandUsage(f.val)
			if err != nil {
				return nil, -1, err
			}
			fields[i] = member{keyUsage, u}
		default:
			key := keyDecode[string(f.key)]
			if key == nil {
				return nil, -1, fmt.Errorf("unknown key code %s", f.key)
			}
			fields[i].key = key
			if bytes.Equal(key, keyType) && len(f.val) > 0 && f.val[0] != '"' {
				t, err := strconv.Atoi(string(f.val))
				if err != nil || t < 0 || t >= len(typeName) {
					return nil, -1, fmt.Errorf("unknown type code %s", f.val)
				}
				fields[i].val = typeName[t]
			}
		}
	}
	return fields, checkpoint, nil
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

// expandCheckpoint returns the checkpointId a coded one, v ("random" or
// [delta, "random"]), stands for, from its chunk's agentId, step and
// timestamp.
func expandCheckpoint(fields []member, v []byte) ([]byte, error) {
	agent, step, ts, ok := checkpointContext(fields)
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

// expandUsage returns the usage object a coded one, v (the array of its
// values in usageKeys order), stands for.
func expandUsage(v []byte) ([]byte, error) {
	vals, ok := arrayElems(make([][]byte, 0, len(usageKeys)), v)
	if !ok || len(vals) == 0 || len(vals) > len(usageKeys) {
		return nil, fmt.Errorf("bad coded usage %s", v)
	}
	out := make([]byte, 0, len(v)+16*len(vals))
	for i, x := range vals {
		out = append(append(append(append(out, "{,"[min(i, 1)]), usageKeys[i]...), ':'), x...)
	}
	return append(out, '}'), nil
}
