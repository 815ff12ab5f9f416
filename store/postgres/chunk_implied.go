package postgres

import (
	"strconv"

	helix "github.com/helix-agents/helix-dbos"
)

// # Implied members
//
// A chunk of a coded row leaves out each member its type implies (the
// entries of codedImplied for its type; of markerImplied in a marker row)
// whose value is the one its row or the chunk before it gives: its agentId
// the row's stream, as a session's own chunks in its own stream have; its
// step the row's; its timestamp the one of the chunk before;
// step_committed's checkpointId the one of the checkpoint_created before it;
// an approval's approvalId its run's ID and its toolCallId; ... A member the
// type implies but the chunk does not have is named, by its key's code, in
// the chunk's "-" string (keyAbsent); one with another value is stored,
// coded (a sub-agent's chunks in its parent's stream keep their agentId).
// Readers add the implied members back (expandChunk). codedImplied is part
// of the stored format: append to it, never change an entry.

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

// keyToolCallID is the quoted key of a chunk's tool call ID.
var keyToolCallID = []byte(`"toolCallId"`)

// codedImplied are the members each type implies, by the type's quoted name.
var codedImplied = map[string][]implied{}

// init fills codedImplied: every type's agentId, step and timestamp (a
// stream's end: its timestamp and streamId), then its own.
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
	for _, t := range codedTypes {
		imp := []implied{impliedAgent, impliedStep, impliedTimestamp}
		if t == helix.ChunkStreamEnd {
			imp = []implied{impliedTimestamp, impliedStreamID}
		}
		codedImplied[strconv.Quote(string(t))] = append(imp, extra[t]...)
	}
}

// implied returns the members a chunk of type (quoted) implies in row's
// format.
func (r codedRow) implied(typ []byte) []implied {
	if r.marker != nil {
		return markerImplied[string(typ)]
	}
	return codedImplied[string(typ)]
}
