package postgres

import (
	"bytes"
	"fmt"
	"strconv"

	helix "github.com/helix-agents/helix-dbos"
)

// # Coded rows, format 3
//
// A coded row, [3, common, chunk, ...], codes keys and values as Coded rows
// (chunkpack.go) says, and leaves out what a chunk repeats of its row or of
// the chunk before it:
//
//   - implied members: a chunk of a type of v3Implied leaves out each of
//     its type's members whose value is the one the row or the chunk before
//     it gives (its agentId the row's stream, as a session's own chunks in
//     its own stream have; its step the row's; its timestamp the one of the
//     chunk before; step_committed's checkpointId the one of the
//     checkpoint_created before it; an approval's approvalId its run's ID
//     and its toolCallId; ...). A member the type implies but the
//     chunk does not have is named, by its key's code, in the chunk's "-"
//     string; one with another value is stored, coded (a sub-agent's
//     chunks in its parent's stream keep their agentId);
//   - "T": a timestamp that is not the one of the chunk before, stored as
//     its difference to it;
//   - a chunk left with its type alone is stored as the type's number.
//
// A row of one chunk is coded too (its common object empty), when that is
// shorter; readers tell it from a chunk stored as it is by its "[".
// packCoded decodes every row as readers do and keeps it only when each
// chunk comes back with exactly its fields and value bytes. v3Implied is
// part of the stored format: append to it, never change an entry.

// v3Version is the first element of a format 3 row.
const v3Version = "3"

// Keys of format 3 of their own: a chunk's implied members it does not
// have, and its timestamp as a difference to the one of the chunk before.
var (
	v3Absent  = []byte(`"-"`)
	v3Delta   = []byte(`"T"`)
	v3TypeKey = []byte(`"t"`)
)

// implied is a member a chunk's type implies: its quoted key, the code of
// its key in a chunk's "-" string, and the value the row and the chunk
// before give it (nil for none).
type implied struct {
	key   []byte
	code  byte
	value func(row codedRow, prev, self []member) []byte
}

// The members types imply. The base ones come first: a decoded chunk gets
// them before the others, which may be built from them.
var (
	impliedAgent     = implied{keyAgentID, 'a', func(row codedRow, _, _ []member) []byte { return row.stream }}
	impliedStep      = implied{keyStep, 's', func(row codedRow, _, _ []member) []byte { return row.step }}
	impliedTimestamp = implied{keyTimestamp, 'm', func(_ codedRow, prev, _ []member) []byte { return valueOf(prev, keyTimestamp) }}
	impliedStepID    = implied{keyStepID, 'j', func(row codedRow, _, _ []member) []byte { return row.stepID }}
	impliedRunID     = implied{keyRunID, 'i', func(row codedRow, _, _ []member) []byte { return row.run }}
	impliedStepCount = implied{[]byte(`"stepCount"`), 'k', func(_ codedRow, _, self []member) []byte { return valueOf(self, keyStep) }}
	impliedPrevCP    = implied{keyCheckpoint, 'p', func(_ codedRow, prev, _ []member) []byte { return valueOf(prev, keyCheckpoint) }}
	impliedStreamID  = implied{[]byte(`"streamId"`), 'w', func(row codedRow, _, _ []member) []byte { return row.stream }}
	// An approval's ID is its run's and tool call's (steps.hitl).
	impliedApproval = implied{[]byte(`"approvalId"`), 'v', func(row codedRow, _, self []member) []byte {
		call, ok := unquote(valueOf(self, keyToolCallID))
		if row.run == nil || !ok {
			return nil
		}
		return appendJSONString(nil, row.runID+"::"+call)
	}}
)

var keyToolCallID = []byte(`"toolCallId"`)

// v3Implied are the members each type implies, by the type's quoted name.
var v3Implied = map[string][]implied{}

func init() {
	extra := map[helix.ChunkType][]implied{
		helix.ChunkStepStart:            {impliedStepID},
		helix.ChunkStepEnd:              {impliedStepID},
		helix.ChunkCheckpointCreated:    {impliedRunID, impliedStepCount},
		helix.ChunkStepCommitted:        {impliedRunID, impliedStepID, impliedPrevCP},
		helix.ChunkStepDiscarded:        {impliedRunID, impliedStepID},
		helix.ChunkRunInterrupted:       {impliedRunID},
		helix.ChunkRunResumed:           {impliedRunID},
		helix.ChunkRunPaused:            {impliedRunID},
		helix.ChunkRunQueued:            {impliedRunID},
		helix.ChunkToolApprovalRequest:  {impliedApproval},
		helix.ChunkToolApprovalResponse: {impliedApproval},
	}
	for _, t := range v2Types {
		imp := []implied{impliedAgent, impliedStep, impliedTimestamp}
		if t == helix.ChunkStreamEnd {
			imp = []implied{impliedTimestamp, impliedStreamID}
		}
		v3Implied[strconv.Quote(string(t))] = append(imp, extra[t]...)
	}
}

// valueOf returns the value of fields' member key, or nil.
func valueOf(fields []member, key []byte) []byte {
	if i := indexKey(fields, key); i >= 0 {
		return fields[i].val
	}
	return nil
}

// codeV3 returns a chunk's fields coded in format 3; prev are the fields of
// the chunk before it in the row (nil for the first).
func codeV3(fields []member, row codedRow, prev []member) []member {
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
				f = member{v3Delta, d}
			}
		}
		out = append(out, f)
	}
	if absent != nil {
		out = append(out, member{v3Absent, append(append([]byte{'"'}, absent...), '"')})
	}
	return out
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

// appendChunkV3 appends a chunk's coded fields less the common ones, as its
// type's number when that is all it has.
func appendChunkV3(buf []byte, fields, common []member) []byte {
	var only []byte
	n := 0
	for _, f := range fields {
		if !hasMember(common, f) {
			n++
			if bytes.Equal(f.key, v3TypeKey) && len(f.val) > 0 && f.val[0] != '"' {
				only = f.val
			}
		}
	}
	if n == 1 && only != nil {
		return append(buf, only...)
	}
	return appendObject(buf, fields, common)
}

// expandV3 gives a format 3 chunk's coded fields (common ones merged in)
// back their keys and values and adds the members its type implies; prev
// are the decoded fields of the chunk before it (nil for the first).
func expandV3(fields []member, row codedRow, prev []member) ([]member, error) {
	var absent, delta []byte
	kept := fields[:0]
	for _, f := range fields {
		switch {
		case bytes.Equal(f.key, v3Absent):
			absent = f.val
		case bytes.Equal(f.key, v3Delta):
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
