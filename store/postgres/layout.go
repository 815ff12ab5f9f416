package postgres

import (
	"fmt"

	helix "github.com/helix-agents/helix-dbos"
)

// The storage layout (migrations/sql/00001_schema.sql). A session and the
// stream it creates get an integer key (helix.sessions.key,
// helix.streams.key, from the sequence helix.session_keys) when their row
// is inserted; the three tables every step appends to are keyed by it:
// helix.messages (session_key, seq), helix.checkpoints (session_key,
// step_count, id_ms, id_rand) and helix.stream_chunks (stream_key, seq).
// Every writer reads the key in the statement that writes (it updates or
// locks the owner's row anyway). A checkpoint's ID is rendered from its
// row (helix.checkpoint_id_of) and found by its parts
// (helix.checkpoint_id_parts): checkpoint IDs are their session's own cpv1
// IDs (helix.FormatCheckpointID).
//
// The fragments below are the one place each of those joins is written.

// sessionMessagesSQL is a subquery of the messages of session row s (an
// alias of helix.sessions) that meet cond (on seq), as columns seq and
// message, in the order and limit of tail ("ORDER BY seq LIMIT $3"; ""
// for none).
func sessionMessagesSQL(s, cond, tail string) string {
	return `(SELECT seq, message FROM helix.messages WHERE session_key = ` + s + `.key AND ` + cond + ` ` + tail + `)`
}

// streamChunksSQL is a subquery of the chunk rows of stream row st (an
// alias of helix.streams) that meet cond, with the columns seq, n, run_id,
// step, attempt, chunk and created_at, in the order and limit of tail (as
// sessionMessagesSQL).
func streamChunksSQL(st, cond, tail string) string {
	const cols = `seq, n, run_id, step, attempt, chunk, created_at`
	return `(SELECT ` + cols + ` FROM helix.stream_chunks WHERE stream_key = ` + st + `.key AND ` + cond + ` ` + tail + `)`
}

// checkpointColumnsOf is checkpointColumns of a helix.checkpoints row c of
// session sid (a SQL expression): the ID rendered.
func checkpointColumnsOf(sid string) string {
	return `helix.checkpoint_id_of(` + sid + `, c.step_count, c.id_ms, c.id_rand), ` + sid + `::text, COALESCE(c.run_id, ''),
	c.step_count, c.message_count, c.stream_sequence, c.status, c.custom_state, c.output, c.created_at`
}

// checkpointIDMatchSQL matches a helix.checkpoints row c of session row s
// (alias) to checkpoint ID id (a SQL expression): the row's primary key,
// from the ID's parts (helix.checkpoint_id_parts; no row for an ID that is
// not one of the session's own).
func checkpointIDMatchSQL(s, id string) string {
	p := `(helix.checkpoint_id_parts(` + id + `, ` + s + `.session_id))`
	return `c.session_key = ` + s + `.key AND c.step_count = ` + p + `[1]::int AND c.id_ms = ` + p + `[2]::bigint AND c.id_rand = ` + p + `[3]`
}

// sessionCheckpointSQL is a lateral subquery of the checkpoint session row
// s (alias) points at (no row: none, or a pointer to a checkpoint that is
// gone), as columns id, stream_sequence, run_id, step_count, created_at:
// one probe of the checkpoints' primary key.
var sessionCheckpointSQL = `SELECT s.checkpoint_id AS id, c.stream_sequence, c.run_id, c.step_count, c.created_at
	FROM helix.checkpoints c WHERE ` + checkpointIDMatchSQL("s", "s.checkpoint_id")

// newestCheckpointIDSQL is a subquery of the ID of the newest checkpoint
// (by write order) of session row s (alias), NULL when it has none.
const newestCheckpointIDSQL = `SELECT helix.checkpoint_id_of(s.session_id, c.step_count, c.id_ms, c.id_rand)
	FROM helix.checkpoints c WHERE c.session_key = s.key ORDER BY c.created_seq DESC LIMIT 1`

// checkpointIDParts returns the parts of checkpoint ID id that a
// helix.checkpoints row of sessionID stores, or an error saying why id
// cannot be one of the session's checkpoint IDs: a checkpoint ID is one of
// its session's own cpv1 IDs, in the form the row renders back
// (helix.checkpoint_id_of).
func checkpointIDParts(sessionID, id string) (helix.ParsedCheckpointID, error) {
	p, err := helix.ParseCheckpointID(id)
	switch {
	case err != nil:
		return p, fmt.Errorf("checkpoint ID %q is not a checkpoint ID (%w): leave the ID empty to have one generated, or use helix.GenerateCheckpointID", id, err)
	case p.SessionID != sessionID:
		return p, fmt.Errorf("checkpoint ID %q names session %q, not %q: a checkpoint ID is one of its own session's", id, p.SessionID, sessionID)
	case p.StepCount > maxCheckpointStep || p.Timestamp > maxCheckpointMillis || helix.FormatCheckpointID(p) != id:
		return p, fmt.Errorf("checkpoint ID %q is not in the canonical form helix.FormatCheckpointID writes (step <= %d, time <= %d): use helix.GenerateCheckpointID", id, maxCheckpointStep, int64(maxCheckpointMillis))
	}
	return p, nil
}

// maxCheckpointStep is the largest step count a checkpoint ID stores (nine
// digits, as helix.checkpoint_id_parts reads them: the column is an
// integer).
const maxCheckpointStep = 999_999_999

// maxCheckpointMillis is the largest timestamp a checkpoint ID stores (18
// digits, as helix.checkpoint_id_parts reads them).
const maxCheckpointMillis = 999_999_999_999_999_999

// CheckpointJournalSQL reads the journal (helix.checkpoints.journal) of
// the first checkpoint of IDs $1 (text[]) of session $2 that was written
// with one: a primary-key look-up per ID. Its columns: the checkpoint's
// ID, its journal and its message count (which a journal's short commit
// entry stands on).
var CheckpointJournalSQL = `SELECT i.id, c.journal, c.message_count FROM unnest($1::text[]) AS i(id)
		JOIN helix.sessions s ON s.session_id = $2
		JOIN helix.checkpoints c ON ` + checkpointIDMatchSQL("s", "i.id") + `
	WHERE c.journal IS NOT NULL
	LIMIT 1`
