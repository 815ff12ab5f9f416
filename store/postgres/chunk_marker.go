package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// # Marker rows (format 4)
//
// A step commit's chunk rows (commitStepSQL) leave out, where they can,
// what the same statement writes in other rows: such a row is
// [4, k, ms, "random", common, chunk, ...], a coded row (format 3,
// chunk_coded.go) with a header and more implied members (markerImplied):
//
//   - the header names the rows the chunks are rendered from: the
//     checkpoint cpv1-{session}-s{step}-t{ms}-{random} the commit wrote
//     (session: the session of the row's run, found through helix.runs, so
//     a sub-agent's or a companion's rows in its parent's stream find their
//     own; step: the row's), the k messages before its message_count (the
//     step's: the assistant message first), and the checkpoint's session
//     (markerSourcesSQL reads them with the row);
//   - the first chunk's timestamp is implied by ms (the one of the chunk
//     before the first, for the coded row's implied members and
//     differences);
//   - a chunk's agentType is the session's agent type; a tool_start's
//     toolCallId, toolName and arguments are those of the assistant
//     message's tool call of its rank among the row's tool_starts; a
//     tool_end's toolCallId and toolName those of the tool message of its
//     rank among the row's tool_ends, its result that message's content
//     (the tool message answering its toolCallId), and providerExecuted
//     true; a step_end's usage the model record of the checkpoint's usage;
//     a checkpoint_created's checkpointId the checkpoint's.
//
// A member the row's sources give with other bytes is stored, as in a coded
// row. Arguments are compared in the form jsonb gives them back
// (normalizeJSONB: the messages are jsonb), so arguments jsonb would change
// (key order, escapes, numbers) are stored. A marker is written only when
// rendering it from the sources the same statement writes gives back the
// chunks byte for byte (packMarker); otherwise the row is written in format
// 3. The renderer is part of the stored format (TestMarkerRenderIsFrozen):
// markerImplied and the header are never changed, a change is format 5.

// v4Version is the first element of a format 4 (marker) row.
const v4Version = "4"

// markerHeaderLen is the number of a marker row's header elements: k, ms and
// random.
const markerHeaderLen = 3

// isMarker reports whether a chunk row's body is a marker row (format 4).
func isMarker(body []byte) bool { return bytes.HasPrefix(body, []byte("["+v4Version+",")) }

// markerSourcesSQL reads the sources of a marker row of stream_chunks c:
// the checkpoint its header names (through the session of the row's run),
// the step's messages and the session's agent type; NULL columns for any
// other row, and for a marker whose checkpoint is gone. A lateral
// subquery; its columns: checkpoint_id, session_id, message_count,
// agent_type, usage (text), messages (text[], in order). The checkpoint
// and the messages are the session's of the row's run, which may not own
// the stream (a sub-agent's steps in its parent's stream).
var markerSourcesSQL = `SELECT cp.checkpoint_id, se.session_id, cp.message_count, se.agent_type, cp.usage::text AS usage,
			ARRAY(SELECT m.message::text FROM ` + sessionMessagesSQL("se", "seq >= cp.message_count - (c.chunk->>1)::int AND seq < cp.message_count", "") + ` m
				ORDER BY m.seq) AS messages
		FROM helix.runs r
		JOIN helix.sessions se ON se.session_id = r.session_id
		JOIN LATERAL (
			SELECT helix.checkpoint_id_of(se.session_id, k.step_count, k.id_ms, k.id_rand) AS checkpoint_id, k.message_count, k.usage
			FROM helix.checkpoints k
			WHERE k.session_key = se.key AND k.step_count = c.step AND k.id_ms::text = (c.chunk->>2) AND k.id_rand = (c.chunk->>3)
		) cp ON true
		WHERE left(c.chunk::text, 3) = '[` + v4Version + `,' AND r.run_id = c.run_id`

// markerRow is a marker row's header and sources, and the ranks of the
// chunk being coded or decoded (reset for each row).
type markerRow struct {
	// header is the row's k, ms and random, as JSON ([]byte of each).
	k            int
	ms           int64
	random       string
	checkpointID []byte // the checkpoint's ID, a JSON string
	agentType    []byte // a JSON string; nil: not derived
	usage        []byte // the model's usage as step_end's usage; nil: none
	calls        []markerCall
	results      []markerResult
	// ranks of the next tool_start and tool_end in the row.
	toolStarts, toolEnds int
}

// markerCall is a tool call of the step's assistant message: its ID, name
// and arguments as JSON (arguments nil when jsonb would change them).
type markerCall struct{ id, name, args []byte }

// markerResult is a step's tool message: its tool call's ID (as JSON and
// as it is), its tool's name and its content (the result's JSON text).
type markerResult struct {
	id, name []byte
	callID   string
	content  []byte
}

// newMarkerRow returns the sources of a marker row: the checkpoint's ID,
// the session's agent type, the checkpoint's usage (checkpoints.usage) and
// the step's messages as JSON (k of them: the ones the commit wrote, or
// jsonb's text of them; the same values either way).
func newMarkerRow(checkpointID, agentType string, usage []byte, messages [][]byte) (*markerRow, error) {
	p, err := helix.ParseCheckpointID(checkpointID)
	if err != nil {
		return nil, err
	}
	m := &markerRow{k: len(messages), ms: p.Timestamp, random: p.Random, checkpointID: appendJSONString(nil, checkpointID)}
	if agentType != "" {
		m.agentType = appendJSONString(nil, agentType)
	}
	if len(usage) > 0 {
		var recs []compactUsage
		if err := json.Unmarshal(usage, &recs); err != nil {
			return nil, fmt.Errorf("decode the checkpoint's usage: %w", err)
		}
		for _, r := range recs {
			if r.T == store.UsageModel {
				m.usage, err = json.Marshal(&helix.Usage{InputTokens: r.I, OutputTokens: r.O, CachedTokens: r.C, CacheWriteTokens: r.W})
				if err != nil {
					return nil, err
				}
				break
			}
		}
	}
	for i, raw := range messages {
		var msg struct {
			Role       string `json:"role"`
			Content    json.RawMessage
			ToolCallID string `json:"toolCallId"`
			ToolName   string `json:"toolName"`
			ToolCalls  []struct {
				ID        string          `json:"id"`
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"toolCalls"`
		}
		if err := json.Unmarshal(raw, &msg); err != nil {
			return nil, fmt.Errorf("decode message %d of the step: %w", i, err)
		}
		switch {
		case i == 0 && msg.Role == string(helix.RoleAssistant):
			for _, c := range msg.ToolCalls {
				args, _ := normalizeJSONB(c.Arguments)
				m.calls = append(m.calls, markerCall{id: appendJSONString(nil, c.ID), name: appendJSONString(nil, c.Name), args: args})
			}
		case msg.Role == string(helix.RoleTool):
			r := markerResult{id: appendJSONString(nil, msg.ToolCallID), name: appendJSONString(nil, msg.ToolName), callID: msg.ToolCallID}
			var content string
			if json.Unmarshal(msg.Content, &content) == nil {
				r.content = []byte(content)
			}
			m.results = append(m.results, r)
		}
	}
	return m, nil
}

// reset starts a row's coding or decoding. m may be nil (not a marker).
func (m *markerRow) reset() {
	if m != nil {
		m.toolStarts, m.toolEnds = 0, 0
	}
}

// first returns the fields of the chunk before a marker's first: its
// timestamp, the header's ms (nil for a row that is not a marker).
func (m *markerRow) first() []member {
	if m == nil {
		return nil
	}
	return []member{{keyTimestamp, strconv.AppendInt(nil, m.ms, 10)}}
}

// advance counts a coded or decoded chunk's type for the ranks.
func (m *markerRow) advance(fields []member) {
	if m == nil {
		return
	}
	switch string(valueOf(fields, keyType)) {
	case typeToolStart:
		m.toolStarts++
	case typeToolEnd:
		m.toolEnds++
	}
}

// appendHeader appends a marker's header elements and a comma (nothing for
// a row that is not a marker).
func (m *markerRow) appendHeader(buf []byte) []byte {
	if m == nil {
		return buf
	}
	buf = strconv.AppendInt(buf, int64(m.k), 10)
	buf = strconv.AppendInt(append(buf, ','), m.ms, 10)
	return append(appendJSONString(append(buf, ','), m.random), ',')
}

// Quoted types and keys the marker's implied members look for.
var (
	typeToolStart = strconv.Quote(string(helix.ChunkToolStart))
	typeToolEnd   = strconv.Quote(string(helix.ChunkToolEnd))
	keyAgentType  = []byte(`"agentType"`)
	keyToolName   = []byte(`"toolName"`)
	jsonTrue      = []byte("true")
)

// The members a marker's sources imply (see Marker rows).
var (
	impliedAgentType = implied{keyAgentType, 'A', func(row codedRow, _, _ []member) []byte { return row.marker.agentType }}
	impliedCallID    = implied{keyToolCallID, 'c', func(row codedRow, _, _ []member) []byte {
		if c := row.marker.call(); c != nil {
			return c.id
		}
		return nil
	}}
	impliedCallName = implied{keyToolName, 'n', func(row codedRow, _, _ []member) []byte {
		if c := row.marker.call(); c != nil {
			return c.name
		}
		return nil
	}}
	impliedCallArgs = implied{[]byte(`"arguments"`), 'g', func(row codedRow, _, _ []member) []byte {
		if c := row.marker.call(); c != nil {
			return c.args
		}
		return nil
	}}
	impliedResultID = implied{keyToolCallID, 'c', func(row codedRow, _, _ []member) []byte {
		if r := row.marker.result(); r != nil {
			return r.id
		}
		return nil
	}}
	impliedResultName = implied{keyToolName, 'n', func(row codedRow, _, _ []member) []byte {
		if r := row.marker.result(); r != nil {
			return r.name
		}
		return nil
	}}
	impliedResult = implied{[]byte(`"result"`), 'r', func(row codedRow, _, self []member) []byte {
		call, ok := unquote(valueOf(self, keyToolCallID))
		if !ok {
			return nil
		}
		for _, r := range row.marker.results {
			if r.callID == call {
				return r.content
			}
		}
		return nil
	}}
	impliedExecuted   = implied{[]byte(`"providerExecuted"`), 'x', func(codedRow, []member, []member) []byte { return jsonTrue }}
	impliedUsage      = implied{keyUsage, 'u', func(row codedRow, _, _ []member) []byte { return row.marker.usage }}
	impliedCheckpoint = implied{keyCheckpoint, 'p', func(row codedRow, _, _ []member) []byte { return row.marker.checkpointID }}
)

// call returns the tool call of the next tool_start's rank, or nil.
func (m *markerRow) call() *markerCall {
	if m.toolStarts < len(m.calls) {
		return &m.calls[m.toolStarts]
	}
	return nil
}

// result returns the tool message of the next tool_end's rank, or nil.
func (m *markerRow) result() *markerResult {
	if m.toolEnds < len(m.results) {
		return &m.results[m.toolEnds]
	}
	return nil
}

// markerImplied are the members each type implies in a marker row:
// codedImplied's, then the sources'. Part of the stored format: never
// change an entry.
var markerImplied = map[string][]implied{}

// init fills markerImplied: a type's codedImplied, its agentType (but a
// stream's end's), then what its sources give.
func init() {
	extra := map[helix.ChunkType][]implied{
		helix.ChunkToolStart:         {impliedCallID, impliedCallName, impliedCallArgs},
		helix.ChunkToolEnd:           {impliedResultID, impliedResultName, impliedResult, impliedExecuted},
		helix.ChunkStepEnd:           {impliedUsage},
		helix.ChunkCheckpointCreated: {impliedCheckpoint},
	}
	for _, t := range codedTypes {
		q := strconv.Quote(string(t))
		imp := slices.Clone(codedImplied[q])
		if t != helix.ChunkStreamEnd {
			imp = append(imp, impliedAgentType)
		}
		markerImplied[q] = append(imp, extra[t]...)
	}
}

// markerWrite is what a step commit's rows may leave out: its run, step
// and sources (a commit without one writes coded rows, format 3).
type markerWrite struct {
	runID string
	step  int
	src   *markerRow
}

// packMarker returns chunks (a row of the commit's run and step) as a
// marker row, when it reads back from m's sources and is shorter than body
// (the row written without sources: a coded row, or a chunk as it is).
// Reading back is packRow's check, as for a coded row: decoding the row
// with the sources gives each chunk's members as they are, and a reader
// renders a chunk from its members through its type, as encodeChunk wrote
// it (replacedUTF8 keeps out the one rendering that differs). Rendering the
// chunks again here as well cost more than packing (0.16 ms a step).
func packMarker(chunks []encodedChunk, m *markerWrite, body string) (string, bool) {
	c0 := chunks[0]
	if m == nil || c0.runID != m.runID || c0.step != m.step || slices.ContainsFunc(chunks, replacedUTF8) {
		return "", false
	}
	row := newCodedRow(c0.streamID, c0.runID, c0.step)
	row.marker = m.src
	marker, ok := packRow(chunks, v4Version, row)
	if !ok || len(marker) >= len(body) {
		return "", false
	}
	return marker, true
}

// markerFor returns the sources of a step commit's marker rows, as the
// commit writes them (readers read the same from its rows), or nil when
// its chunks cannot be markers (a checkpoint ID not of
// helix.GenerateCheckpointID's form for the session and step).
func markerFor(c store.StepCommit, checkpointID string, msgs []string, usage []byte) *markerWrite {
	p, err := helix.ParseCheckpointID(checkpointID)
	if err != nil || p.SessionID != c.SessionID || p.StepCount != c.Step || string(appendCheckpointID(nil, p)) != checkpointID ||
		strings.ContainsAny(p.Random, `"\`) {
		return nil
	}
	raws := make([][]byte, len(msgs))
	for i, m := range msgs {
		raws[i] = []byte(m)
	}
	src, err := newMarkerRow(checkpointID, c.AgentType, usage, raws)
	if err != nil || slices.ContainsFunc(src.calls, func(c markerCall) bool { return c.args == nil }) {
		// Sources must be the same as a reader's: arguments whose jsonb
		// form normalizeJSONB is not sure of might be derived by a reader
		// (from jsonb's text) and not here.
		return nil
	}
	return &markerWrite{runID: c.RunID, step: c.Step, src: src}
}

// markerSources is a marker's sources as markerSourcesSQL reads them.
type markerSources struct {
	checkpointID *string
	sessionID    *string
	messageCount *int
	agentType    *string
	usage        *string
	messages     []string
}

// dest returns the scan targets of markerSourcesSQL's columns.
func (s *markerSources) dest() []any {
	return []any{&s.checkpointID, &s.sessionID, &s.messageCount, &s.agentType, &s.usage, &s.messages}
}

// row returns the sources of a marker row, or an error when they are gone
// (the checkpoint, or the session's run, was deleted without the row).
func (s *markerSources) row(body []byte, seq int64) (*markerRow, error) {
	if s.checkpointID == nil {
		return nil, fmt.Errorf("stream row %d: a marker row (format 4) whose checkpoint is gone: "+
			"its step's rows were removed without it (run helix-dbos doctor; reset the stream to recover)", seq)
	}
	var usage []byte
	if s.usage != nil {
		usage = []byte(*s.usage)
	}
	raws := make([][]byte, len(s.messages))
	for i, m := range s.messages {
		raws[i] = []byte(m)
	}
	m, err := newMarkerRow(*s.checkpointID, deref(s.agentType), usage, raws)
	if err != nil {
		return nil, fmt.Errorf("stream row %d: the sources of its marker: %w", seq, err)
	}
	if k, ok := markerK(body); !ok || k != len(raws) {
		return nil, fmt.Errorf("stream row %d: its marker names %d messages, %d are there (messages removed without it)", seq, k, len(raws))
	}
	return m, nil
}

// unpack returns the chunks of a row read with its sources (unpackRow,
// rendered from s for a marker row).
func (s *markerSources) unpack(body []byte, n int, streamID, runID string, step int, seq int64) ([]helix.Chunk, [][]byte, error) {
	if !isMarker(body) {
		return unpackRow(body, n, streamID, runID, step)
	}
	m, err := s.row(body, seq)
	if err != nil {
		return nil, nil, err
	}
	return unpackRowWith(body, n, streamID, runID, step, m)
}

// deref returns *s, or "" for nil (a NULL column).
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// markerK reads a marker row's k (its header's first element).
func markerK(body []byte) (int, bool) {
	rest := body[len("["+v4Version+","):]
	end := bytes.IndexByte(rest, ',')
	if end < 0 {
		return 0, false
	}
	k, err := strconv.Atoi(string(rest[:end]))
	return k, err == nil
}

// literalMarkersSQL finds the marker rows whose checkpoints a truncation
// of session $1 to $2 messages deletes, with their sources: the session's
// markers (in its stream, its parent's for a sub-agent) after its newest
// kept checkpoint's stream sequence (a session's commits are in its
// stream in the order of their message counts).
var literalMarkersSQL = `SELECT s.stream_id, c.seq, c.n, COALESCE(c.run_id, ''), c.step, c.attempt, c.chunk, c.created_at, src.*
	FROM helix.sessions s
	JOIN helix.streams st ON st.stream_id = s.stream_id
	JOIN LATERAL ` + streamChunksSQL("st", `seq > COALESCE((SELECT max(k.stream_sequence)
		FROM helix.checkpoints k WHERE k.session_key = s.key AND k.message_count <= $2), 0)`, "") + ` c ON true
	JOIN LATERAL (` + markerSourcesSQL + `) src ON true
	WHERE s.session_id = $1 AND src.session_id = $1 AND src.message_count > $2
	ORDER BY c.seq`

// literalMarkers rewrites, in q's transaction, the marker rows whose
// checkpoints a truncation of sessionID to count messages deletes as rows
// of format 3 (what the rows held before markers): their chunks stay in
// the stream, byte for byte and at their sequences, so readers see no
// change (no truncation epoch), and no marker names a checkpoint that is
// gone. Run it before the truncation deletes the messages and checkpoints.
func literalMarkers(ctx context.Context, q Querier, sessionID string, count int) error {
	rows, err := q.Query(ctx, literalMarkersSQL, sessionID, count)
	if err != nil {
		return fmt.Errorf("find the marker rows of the checkpoints truncated: %w", err)
	}
	defer rows.Close()
	var (
		gone []int64
		lit  literalRows
	)
	for rows.Next() {
		var (
			streamID     string
			seq          int64
			n, step, att int
			runID        string
			body         []byte
			created      time.Time
			src          markerSources
		)
		if err := rows.Scan(append([]any{&streamID, &seq, &n, &runID, &step, &att, &body, &created}, src.dest()...)...); err != nil {
			return err
		}
		_, raws, err := src.unpack(body, n, streamID, runID, step, seq)
		if err != nil {
			return err
		}
		gone = append(gone, seq)
		if err := lit.add(raws, streamID, seq, runID, step, att, created); err != nil {
			return fmt.Errorf("stream row %d: %w", seq, err)
		}
	}
	if err := rows.Err(); err != nil || len(gone) == 0 {
		return err
	}
	_, err = q.Exec(ctx, `DELETE FROM helix.stream_chunks c USING helix.sessions s JOIN helix.streams t ON t.stream_id = s.stream_id
		WHERE s.session_id = $1 AND c.stream_key = t.key AND c.seq = ANY($2::bigint[])`, sessionID, gone)
	if err != nil {
		return fmt.Errorf("remove the marker rows of the checkpoints truncated: %w", err)
	}
	_, err = q.Exec(ctx, `INSERT INTO helix.stream_chunks (stream_key, seq, n, run_id, step, attempt, chunk, created_at)
		SELECT t.key, u.seq, u.n, NULLIF(u.r, ''), u.s, u.a, u.c, u.t
		FROM helix.sessions s JOIN helix.streams t ON t.stream_id = s.stream_id,
			unnest($2::bigint[], $3::int[], $4::text[], $5::int[], $6::int[], $7::json[], $8::timestamptz[])
			AS u(seq, n, r, s, a, c, t)
		WHERE s.session_id = $1`,
		sessionID, lit.seqs, lit.counts, lit.runIDs, lit.steps, lit.attempts, lit.bodies, lit.created)
	if err != nil {
		return fmt.Errorf("write the truncated checkpoints' chunks as rows of format 3: %w", err)
	}
	return nil
}

// literalRows are chunk rows of format 3 for literalMarkers' insert.
type literalRows struct {
	seqs                    []int64
	counts, steps, attempts []int32
	runIDs, bodies          []string
	created                 []time.Time
}

// add packs the chunks of a marker row whose last sequence is seq into
// rows of format 3 (several when they do not pack into one).
func (l *literalRows) add(raws [][]byte, streamID string, seq int64, runID string, step, attempt int, created time.Time) error {
	enc := make([]encodedChunk, len(raws))
	for i, raw := range raws {
		enc[i] = encodedChunk{streamID: streamID, raw: raw, step: step, runID: runID, attempt: attempt}
	}
	packed, err := packChunks(enc)
	if err != nil {
		return err
	}
	at := seq - int64(len(raws))
	for _, r := range packed {
		at += int64(r.n)
		l.seqs, l.counts, l.steps, l.attempts = append(l.seqs, at), append(l.counts, int32(r.n)), append(l.steps, int32(r.step)), append(l.attempts, int32(r.attempt))
		l.runIDs, l.bodies, l.created = append(l.runIDs, r.runID), append(l.bodies, r.body), append(l.created, created)
	}
	return nil
}
