package postgres

import (
	"strconv"

	helix "github.com/helix-agents/helix-dbos"
)

// The two layouts of the per-step tables (migration 00029,
// FormatLevelKeyedTables). A session created at level 4 or more has a key
// (helix.sessions.key), and its messages and checkpoints are rows of
// helix.messages_k and helix.checkpoints_k for its whole life; a stream
// created at that level has one too, and its chunk rows are in
// helix.stream_chunks_k. Sessions and streams without a key write the
// tables of migration 00001. The owner's row decides, never the level at
// the time of the write: every writer reads the key in the statement that
// writes (it updates or locks the owner's row anyway), and every reader
// reads both tables, the one that has nothing for the owner costing one
// index probe (or none: a one-time filter on the key).

// newKeySQL is the key a session or stream created with keyed ($n true)
// gets: NULL below FormatLevelKeyedTables.
func newKeySQL(n int) string {
	return `CASE WHEN $` + strconv.Itoa(n) + `::bool THEN nextval('helix.session_keys') END`
}

// sessionMessagesSQL is a subquery of the messages of session row s (an
// alias of helix.sessions) in both layouts that meet cond (on seq), as
// columns seq and message, each table's in the order and limit of tail
// ("ORDER BY seq LIMIT $3"; "" for none): the caller orders the union
// again. Each arm is an index scan of its primary key, the one of the
// other layout skipped by a one-time filter on the key (Postgres does not
// merge a lateral union in order: an outer ORDER BY ... LIMIT alone would
// read every row that meets cond).
func sessionMessagesSQL(s, cond, tail string) string {
	return `((SELECT seq, message FROM helix.messages WHERE session_id = ` + s + `.session_id AND ` + s + `.key IS NULL AND ` + cond + ` ` + tail + `)
		UNION ALL
		(SELECT seq, message FROM helix.messages_k WHERE session_key = ` + s + `.key AND ` + cond + ` ` + tail + `))`
}

// streamChunksSQL is a subquery of the chunk rows of stream row st (an
// alias of helix.streams) in both layouts that meet cond, with the columns
// of helix.stream_chunks but stream_id, each table's in the order and
// limit of tail (as sessionMessagesSQL).
func streamChunksSQL(st, cond, tail string) string {
	const cols = `seq, n, run_id, step, attempt, chunk, created_at`
	return `((SELECT ` + cols + ` FROM helix.stream_chunks WHERE stream_id = ` + st + `.stream_id AND ` + st + `.key IS NULL AND ` + cond + ` ` + tail + `)
		UNION ALL
		(SELECT ` + cols + ` FROM helix.stream_chunks_k WHERE stream_key = ` + st + `.key AND ` + cond + ` ` + tail + `))`
}

// keyedCheckpointColumns is checkpointColumns of a helix.checkpoints_k row
// c of session sid (a SQL expression): the ID rendered.
func keyedCheckpointColumns(sid string) string {
	return `helix.checkpoint_id_of(` + sid + `, c.step_count, c.id_ms, c.id_rand), ` + sid + `::text, COALESCE(c.run_id, ''),
	c.step_count, c.message_count, c.stream_sequence, c.status, c.custom_state, c.output, c.created_at`
}

// keyedIDMatchSQL matches a helix.checkpoints_k row c of session row s
// (alias) to checkpoint ID id (a SQL expression): the row's primary key,
// from the ID's parts (helix.checkpoint_id_parts; no row for an ID that is
// not one of the session's own cpv1 IDs).
func keyedIDMatchSQL(s, id string) string {
	p := `(helix.checkpoint_id_parts(` + id + `, ` + s + `.session_id))`
	return `c.session_key = ` + s + `.key AND c.step_count = ` + p + `[1]::int AND c.id_ms = ` + p + `[2]::bigint AND c.id_rand = ` + p + `[3]`
}

// sessionCheckpointSQL is a lateral subquery of the checkpoint session row
// s (alias) points at, in either layout (no row: none, or a pointer to a
// checkpoint that is gone), as columns id, stream_sequence, run_id,
// step_count, created_at. A pointer to a keyed checkpoint is one probe of
// its primary key. The empty string, which a step commit wrote from
// migration 00026 until 00034 (and a release before 00034 still writes),
// is the session's newest checkpoint: the newest by created_seq of each
// table (of checkpoints_k, a scan of the session's rows since 00034 dropped
// its created_seq index).
var sessionCheckpointSQL = `SELECT x.id, x.stream_sequence, x.run_id, x.step_count, x.created_at FROM (
		(SELECT c.checkpoint_id AS id, c.stream_sequence, c.run_id, c.step_count, c.created_at, c.created_seq
		 FROM helix.checkpoints c WHERE s.checkpoint_id = '' AND c.session_id = s.session_id ORDER BY c.created_seq DESC LIMIT 1)
		UNION ALL
		(SELECT helix.checkpoint_id_of(s.session_id, c.step_count, c.id_ms, c.id_rand), c.stream_sequence, c.run_id,
			c.step_count, c.created_at, c.created_seq
		 FROM helix.checkpoints_k c WHERE s.checkpoint_id = '' AND c.session_key = s.key ORDER BY c.created_seq DESC LIMIT 1)
		UNION ALL
		(SELECT c.checkpoint_id, c.stream_sequence, c.run_id, c.step_count, c.created_at, c.created_seq
		 FROM helix.checkpoints c WHERE c.checkpoint_id = s.checkpoint_id)
		UNION ALL
		(SELECT s.checkpoint_id, c.stream_sequence, c.run_id, c.step_count, c.created_at, c.created_seq
		 FROM helix.checkpoints_k c WHERE s.checkpoint_id <> '' AND ` + keyedIDMatchSQL("s", "s.checkpoint_id") + `)
	) x ORDER BY x.created_seq DESC LIMIT 1`

// compactID returns the parts of checkpoint ID id that a helix.checkpoints_k
// row of sessionID stores, and whether id is such an ID: one of the
// session's own cpv1 IDs, in the form the row renders back
// (helix.checkpoint_id_of). Other IDs (given by a caller) are stored in
// helix.checkpoints with their text.
func compactID(sessionID, id string) (p helix.ParsedCheckpointID, ok bool) {
	p, err := helix.ParseCheckpointID(id)
	if err != nil || p.SessionID != sessionID || p.StepCount > maxCompactStep || p.Timestamp > maxCompactMillis || helix.FormatCheckpointID(p) != id {
		return helix.ParsedCheckpointID{}, false
	}
	return p, true
}

// maxCompactStep is the largest step count a compact ID stores (nine
// digits, as helix.checkpoint_id_parts reads them: the column is an
// integer).
const maxCompactStep = 999_999_999

// maxCompactMillis is the largest timestamp a compact ID stores (18
// digits, as helix.checkpoint_id_parts reads them).
const maxCompactMillis = 999_999_999_999_999_999

// CheckpointJournalSQL reads the journal (checkpoints.journal, migration
// 00025) of the first checkpoint of IDs $1 (text[]) of session $2 that was
// written with one, in either layout: a primary-key look-up per ID. Its
// columns: the checkpoint's ID, its journal and its message count (which
// a journal's short commit entry stands on, FormatLevelCompactJournals).
var CheckpointJournalSQL = `SELECT checkpoint_id, journal, message_count FROM helix.checkpoints
	WHERE checkpoint_id = ANY($1) AND journal IS NOT NULL
	UNION ALL
	SELECT i.id, c.journal, c.message_count FROM unnest($1::text[]) AS i(id)
		JOIN helix.sessions s ON s.session_id = $2
		JOIN helix.checkpoints_k c ON ` + keyedIDMatchSQL("s", "i.id") + `
	WHERE c.journal IS NOT NULL
	LIMIT 1`
