package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// insertChunksSQL appends chunks for any number of streams in one statement,
// packed into rows (chunk_rows.go).
// Stream rows are locked in stream_id order (no deadlock between concurrent
// batches), each stream's sequence range is allocated under its row lock, so
// ranges commit in order and readers never see a later sequence before an
// earlier one. Streams that are not active get nothing and are reported with
// written = false. When $6 is not NULL the batch token is recorded (with the
// streams written) so a retry after a lost acknowledgement can tell whether
// the batch already committed. One NOTIFY per statement wakes readers.
// An append leaves the stream's updated_at alone (streamUpdatedAtSQL: the
// newest chunk row's created_at is the stream's last change). Its last
// column counts the stream's rows dropped by their fences (0 here; see
// insertFencedChunksSQL).
var insertChunksSQL = insertChunksStatement(plainInputSQL, `SELECT stream_id, 0::bigint AS n FROM counts`)

// insertFencedChunksSQL is insertChunksSQL for rows with fences ($10 the
// workflow, $11 its execution's owner token, empty for none: store.Fence):
// a row is written only while that execution owns the workflow
// (fencedInputSQL), and the last column counts a stream's dropped rows.
var insertFencedChunksSQL = insertChunksStatement(fencedInputSQL,
	`SELECT g.stream_id, count(*) - count(i.ord) AS n FROM given g LEFT JOIN input i USING (ord) GROUP BY g.stream_id`)

func insertChunksStatement(input, dropped string) string {
	return `WITH ` + input + `, counts AS (
		SELECT stream_id, sum(n)::bigint AS n FROM input GROUP BY stream_id
	), locked AS (
		SELECT s.stream_id, s.status, s.latest_seq FROM helix.streams s JOIN counts c USING (stream_id)
		ORDER BY s.stream_id FOR UPDATE OF s
	), upd AS (
		UPDATE helix.streams s SET latest_seq = s.latest_seq + c.n
		FROM counts c, locked l
		WHERE s.stream_id = c.stream_id AND l.stream_id = c.stream_id AND l.status = 'active'
		RETURNING s.stream_id, s.latest_seq - c.n AS base, s.latest_seq AS latest, s.key
	), newrows AS (
		SELECT i.stream_id, u.key, u.base + sum(i.n) OVER (PARTITION BY i.stream_id ORDER BY i.ord) AS seq, i.n,
			NULLIF(i.run_id, '') AS run_id, i.step, i.attempt, i.chunk
		FROM input i JOIN upd u USING (stream_id)
	), ins AS (
		INSERT INTO helix.stream_chunks (stream_key, seq, n, run_id, step, attempt, chunk)
		SELECT key, seq, n, run_id, step, attempt, chunk FROM newrows
	), batch AS (
		INSERT INTO helix.stream_write_batches (batch_id, streams)
		SELECT $6, COALESCE((SELECT array_agg(stream_id) FROM upd), '{}') WHERE $6::uuid IS NOT NULL
	), notified AS (
		SELECT helix.announce($7, p) FROM unnest($8::text[]) AS p WHERE EXISTS (SELECT 1 FROM upd)
	), dropped AS (
		` + dropped + `
	)
	SELECT d.stream_id, COALESCE(l.status, ''), COALESCE(u.latest, l.latest_seq, 0), u.stream_id IS NOT NULL,
		(SELECT count(*) FROM notified), d.n
	FROM dropped d LEFT JOIN locked l USING (stream_id) LEFT JOIN upd u USING (stream_id)`
}

// plainInputSQL is the start of the append statements for rows without
// fences: the rows to write (input).
const plainInputSQL = `input AS (
		SELECT * FROM unnest($1::text[], $2::json[], $3::int[], $4::text[], $5::int[], $9::int[])
			WITH ORDINALITY AS u(stream_id, chunk, step, run_id, attempt, n, ord)
	)`

// fencedInputSQL is the start of the append statements for rows with
// fences: the rows given (given); the status rows of their fences'
// workflows, locked FOR SHARE in workflow order (fences): a takeover's
// UPDATE of such a row waits for the append to commit, and an append that
// waited for a takeover reads the row's new version, whose owner token is
// no longer its fence's; and the rows to write (input): those without a
// fence, and those whose workflow's owner token is still their fence's.
const fencedInputSQL = `given AS (
		SELECT * FROM unnest($1::text[], $2::json[], $3::int[], $4::text[], $5::int[], $9::int[], $10::text[], $11::text[])
			WITH ORDINALITY AS u(stream_id, chunk, step, run_id, attempt, n, fence_wf, fence_owner, ord)
	), fences AS MATERIALIZED (
		SELECT w.workflow_uuid, w.owner_xid FROM dbos.workflow_status w
		WHERE w.workflow_uuid = ANY($10::text[]) ORDER BY w.workflow_uuid FOR SHARE
	), input AS (
		SELECT g.stream_id, g.chunk, g.step, g.run_id, g.attempt, g.n, g.ord
		FROM given g LEFT JOIN fences f ON f.workflow_uuid = g.fence_wf
		WHERE g.fence_wf = '' OR f.owner_xid = g.fence_owner
	)`

// insertStreamChunksSQL is insertChunksSQL for chunks of one stream (an
// agent step's, a stream writer's batch of one stream): the update of the
// stream row locks it, with no explicit lock first (SELECT ... FOR UPDATE
// writes a WAL record of its own, about 54 bytes per append). Same
// arguments ($1's stream IDs all the same) and result rows; a stream that
// is not active (or missing) is read under a lock, as insertChunksSQL
// reads it.
var insertStreamChunksSQL = insertStreamChunksStatement(plainInputSQL, `SELECT 0::bigint AS n`)

// insertFencedStreamChunksSQL is insertStreamChunksSQL for rows with
// fences, as insertFencedChunksSQL is insertChunksSQL's; a stream whose
// rows were all dropped is read under a lock, as one not active.
var insertFencedStreamChunksSQL = insertStreamChunksStatement(fencedInputSQL,
	`SELECT (SELECT count(*) FROM given) - (SELECT count(*) FROM input) AS n`)

func insertStreamChunksStatement(input, dropped string) string {
	return `WITH ` + input + `, upd AS (
		UPDATE helix.streams SET latest_seq = latest_seq + (SELECT sum(n) FROM input)
		WHERE stream_id = ($1::text[])[1] AND status = 'active' AND EXISTS (SELECT 1 FROM input)
		RETURNING latest_seq - (SELECT sum(n) FROM input) AS base, latest_seq AS latest, key
	), ins AS (
		INSERT INTO helix.stream_chunks (stream_key, seq, n, run_id, step, attempt, chunk)
		SELECT u.key, u.base + sum(i.n) OVER (ORDER BY i.ord), i.n, NULLIF(i.run_id, ''), i.step, i.attempt, i.chunk
		FROM input i, upd u
	), batch AS (
		INSERT INTO helix.stream_write_batches (batch_id, streams)
		SELECT $6, CASE WHEN EXISTS (SELECT 1 FROM upd) THEN ARRAY[($1::text[])[1]] ELSE '{}' END
		WHERE $6::uuid IS NOT NULL
	), notified AS (
		SELECT helix.announce($7, p) FROM unnest($8::text[]) AS p WHERE EXISTS (SELECT 1 FROM upd)
	), dropped AS (
		` + dropped + `
	)
	SELECT ($1::text[])[1], 'active', latest, true, (SELECT count(*) FROM notified), (SELECT n FROM dropped) FROM upd
	UNION ALL
	SELECT ($1::text[])[1], COALESCE(l.status, ''), COALESCE(l.latest_seq, 0), false, 0, (SELECT n FROM dropped)
	FROM (SELECT 1) AS one LEFT JOIN LATERAL (SELECT s.status, s.latest_seq FROM helix.streams s
		WHERE s.stream_id = ($1::text[])[1] FOR SHARE) l ON true
	WHERE NOT EXISTS (SELECT 1 FROM upd)`
}

// encodedChunk is a chunk ready for insertChunksSQL.
type encodedChunk struct {
	streamID string
	raw      []byte
	step     int
	runID    string
	attempt  int
	fence    store.Fence // zero: none
}

func encodeChunk(streamID string, c helix.Chunk, runID string, attempt int) (encodedChunk, error) {
	if c == nil {
		return encodedChunk{}, errors.New("chunk is nil")
	}
	if c.ChunkType() == helix.ChunkStreamEnd {
		return encodedChunk{}, errors.New("stream_end is written by EndStream, not as a chunk")
	}
	step := 0
	if b := c.ChunkBase(); b != nil {
		step = b.Step
		if b.Timestamp == 0 {
			b.Timestamp = time.Now().UnixMilli()
		}
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return encodedChunk{}, fmt.Errorf("encode %s chunk: %w", c.ChunkType(), err)
	}
	return encodedChunk{streamID: streamID, raw: raw, step: step, runID: runID, attempt: attempt}, nil
}

// streamWrite is the per-stream outcome of insertChunksSQL.
type streamWrite struct {
	status  helix.StreamStatus // "" when the stream does not exist
	latest  int64
	written bool
	fenced  int64 // rows dropped because their fence failed
}

// insertChunks runs insertChunksSQL; token may be uuid.Nil for no token.
// Outside a transaction of the caller's (the store's own statements on its
// pool) the readers' notification is sent after the statement, off its
// write path (Store.Announce): a statement that notifies holds Postgres's
// notification lock until its commit is flushed. In a caller's
// transaction it goes out at that transaction's commit.
func (s *Store) insertChunks(ctx context.Context, q Querier, chunks []encodedChunk, token uuid.UUID) (map[string]streamWrite, error) {
	sql, args, payloads, err := s.insertChunksArgs(chunks, token, !s.inTx)
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	res, err := scanChunkWrites(rows, len(chunks))
	if err == nil {
		for _, p := range payloads {
			s.Announce(s.shared.opts.notifyChannel, p)
		}
	}
	return res, err
}

// insertChunksArgs packs chunks into rows and returns the statement that
// appends them (insertStreamChunksSQL for one stream, else insertChunksSQL)
// and its arguments. With later the statement notifies nothing, and later
// are the notifications its caller sends once it succeeded.
func (s *Store) insertChunksArgs(chunks []encodedChunk, token uuid.UUID, announceLater bool) (sql string, args []any, later []string, err error) {
	packed, err := packChunks(chunks)
	if err != nil {
		return "", nil, nil, err
	}
	n := len(packed)
	ids, bodies, runIDs := make([]string, n), make([]string, n), make([]string, n)
	steps, attempts, counts := make([]int32, n), make([]int32, n), make([]int32, n)
	var fenceWFs, fenceOwners []string // nil: no row has a fence
	seen := map[string]bool{}
	var distinct []string
	for i, r := range packed {
		ids[i], bodies[i], runIDs[i] = r.streamID, r.body, r.runID
		steps[i], attempts[i], counts[i] = int32(r.step), int32(r.attempt), int32(r.n)
		if r.fence != (store.Fence{}) && fenceWFs == nil {
			fenceWFs, fenceOwners = make([]string, n), make([]string, n)
		}
		if fenceWFs != nil {
			fenceWFs[i], fenceOwners[i] = r.fence.WorkflowID, r.fence.Owner
		}
		if !seen[r.streamID] {
			seen[r.streamID] = true
			distinct = append(distinct, r.streamID)
		}
	}
	var tok any
	if token != uuid.Nil {
		tok = token
	}
	payloads := notifyPayloads(distinct)
	if announceLater {
		later, payloads = payloads, []string{}
	}
	args = []any{ids, bodies, steps, runIDs, attempts, tok, s.shared.opts.notifyChannel, payloads, counts}
	switch {
	case fenceWFs != nil && len(distinct) == 1:
		return insertFencedStreamChunksSQL, append(args, fenceWFs, fenceOwners), later, nil
	case fenceWFs != nil:
		return insertFencedChunksSQL, append(args, fenceWFs, fenceOwners), later, nil
	case len(distinct) == 1:
		return insertStreamChunksSQL, args, later, nil
	}
	return insertChunksSQL, args, later, nil
}

// scanChunkWrites reads insertChunksSQL's per-stream outcomes.
func scanChunkWrites(rows Rows, streams int) (map[string]streamWrite, error) {
	out := make(map[string]streamWrite, streams)
	for rows.Next() {
		var id, status string
		var w streamWrite
		var notified int64
		if err := rows.Scan(&id, &status, &w.latest, &w.written, &notified, &w.fenced); err != nil {
			return nil, err
		}
		w.status = helix.StreamStatus(status)
		out[id] = w
	}
	return out, rows.Err()
}

// maxNotifyPayload stays below Postgres's 8000-byte NOTIFY payload limit.
const maxNotifyPayload = 7900

// notifyPayloads packs stream IDs, newline-separated, into as few NOTIFY
// payloads as the size limit allows. IDs longer than the limit are skipped:
// their readers fall back to polling.
func notifyPayloads(streamIDs []string) []string {
	var out []string
	var b strings.Builder
	for _, id := range streamIDs {
		if len(id) > maxNotifyPayload || strings.ContainsRune(id, '\n') {
			continue
		}
		if b.Len() > 0 && b.Len()+1+len(id) > maxNotifyPayload {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(id)
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// writeError converts the outcome of one stream in a write into an error;
// fenced tells whether the chunks whose outcome it is had a fence (rows of
// other writers' fences may have been dropped beside them).
func writeError(streamID string, w streamWrite, ok, fenced bool) error {
	switch {
	case fenced && w.fenced > 0:
		return store.ErrFenced
	case !ok || w.status == "":
		return notFound("stream", streamID)
	case !w.written:
		return &helix.StreamNotActiveError{StreamID: streamID, Status: w.status}
	}
	return nil
}

// CreateStream implements store.StreamStore.
func (s *Store) CreateStream(ctx context.Context, streamID string, opts *store.CreateStreamOptions) error {
	if err := validateID("stream", streamID); err != nil {
		return fmt.Errorf("store: create stream: %w", err)
	}
	var owner any
	if opts != nil && opts.OwnerSessionID != "" {
		owner = opts.OwnerSessionID
	}
	// The owner's row is locked (FOR KEY SHARE) until the insert commits:
	// a deletion of the owner waits for it, then deletes the stream too.
	var ok bool
	err := s.shared.pool.QueryRow(ctx, `WITH o AS (
			SELECT $2::text IS NULL OR EXISTS (SELECT 1 FROM helix.sessions WHERE session_id = $2 FOR KEY SHARE) AS ok
		), ins AS (
			INSERT INTO helix.streams (stream_id, owner_session_id) SELECT $1, $2 FROM o WHERE o.ok
			ON CONFLICT (stream_id) DO NOTHING
		)
		SELECT ok FROM o`, streamID, owner).Scan(&ok)
	if err == nil && !ok {
		err = notFound("owner session", fmt.Sprint(owner))
	}
	return wrap(err, "create stream %s", streamID)
}

// Append implements store.StreamStore. On a WithQuerier view it runs in the
// caller's transaction, so the chunks commit (and become visible) with it.
func (s *Store) Append(ctx context.Context, streamID string, chunks []store.ChunkWrite) (int64, error) {
	if len(chunks) == 0 {
		info, err := s.GetStreamInfo(ctx, streamID)
		if err != nil {
			return 0, err
		}
		return info.LatestSequence, nil
	}
	enc, fenced, err := encodeWrites(streamID, chunks)
	if err != nil {
		return 0, err
	}
	res, err := s.insertChunks(ctx, s.q, enc, uuid.Nil)
	if err != nil {
		return 0, wrap(err, "append to stream %s", streamID)
	}
	w, ok := res[streamID]
	if err := writeError(streamID, w, ok, fenced); err != nil {
		return 0, wrap(err, "append to stream %s", streamID)
	}
	return w.latest, nil
}

// encodeWrites encodes chunks for an append to streamID, and reports
// whether any has a fence.
func encodeWrites(streamID string, chunks []store.ChunkWrite) (enc []encodedChunk, fenced bool, err error) {
	enc = make([]encodedChunk, len(chunks))
	for i, c := range chunks {
		if enc[i], err = encodeChunk(streamID, c.Chunk, c.RunID, c.Attempt); err != nil {
			return nil, false, fmt.Errorf("store: append to stream %s: chunk %d: %w", streamID, i, err)
		}
		if c.Fence != nil {
			enc[i].fence, fenced = *c.Fence, true
		}
	}
	return enc, fenced, nil
}

// AppendHeld is Append inside a transaction that can hold writes for its
// next statement (a [Deferrer] querier, see [Store.WithQuerier]): the
// append goes out with that statement, in the same round trip, and its
// outcome is not read (a stream that is not active gets nothing; the
// callers' transactions check the stream's status under a lock anyway).
// On any other querier it is Append.
func (s *Store) AppendHeld(ctx context.Context, streamID string, chunks []store.ChunkWrite) error {
	d, ok := s.q.(Deferrer)
	if !ok || len(chunks) == 0 {
		_, err := s.Append(ctx, streamID, chunks)
		return err
	}
	sql, args, err := s.HeldAppendStatement(streamID, chunks)
	if err != nil {
		return err
	}
	d.Defer(ctx, sql, args...)
	return nil
}

// HeldAppendStatement returns the statement [Store.AppendHeld] holds for
// the append of chunks to streamID, for a transaction that sends it itself
// (its outcome unread: such callers' transactions check the stream's
// status and their workflow's owner themselves).
func (s *Store) HeldAppendStatement(streamID string, chunks []store.ChunkWrite) (sql string, args []any, err error) {
	enc, _, err := encodeWrites(streamID, chunks)
	if err != nil {
		return "", nil, err
	}
	sql, args, _, err = s.insertChunksArgs(enc, uuid.Nil, false)
	if err != nil {
		return "", nil, fmt.Errorf("store: append to stream %s: %w", streamID, err)
	}
	return sql, args, nil
}

// QueueAppend queues the append of chunks to streamID on b, for a caller
// that sends it with other statements in one round trip (pgx sends a batch
// in one implicit transaction): the statement Append runs, with Append's
// errors (a stream that does not exist or is not active fails the batch's
// result for it, which the caller sees when it reads the batch's results).
func (s *Store) QueueAppend(b *pgx.Batch, streamID string, chunks []store.ChunkWrite) error {
	if len(chunks) == 0 {
		return nil
	}
	enc, fenced, err := encodeWrites(streamID, chunks)
	if err != nil {
		return err
	}
	sql, args, _, err := s.insertChunksArgs(enc, uuid.Nil, false)
	if err != nil {
		return fmt.Errorf("store: append to stream %s: %w", streamID, err)
	}
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		out, err := scanChunkWrites(rows, 1)
		if err != nil {
			return wrap(err, "append to stream %s", streamID)
		}
		w, ok := out[streamID]
		return wrap(writeError(streamID, w, ok, fenced), "append to stream %s", streamID)
	})
	return nil
}

// lockStream locks a stream row and returns its status and latest sequence.
func lockStream(ctx context.Context, q Querier, streamID string) (helix.StreamStatus, int64, error) {
	var status string
	var latest int64
	err := q.QueryRow(ctx, `SELECT status, latest_seq FROM helix.streams WHERE stream_id = $1 FOR UPDATE`, streamID).
		Scan(&status, &latest)
	if isNoRows(err) {
		return "", 0, notFound("stream", streamID)
	}
	return helix.StreamStatus(status), latest, err
}

// notify sends the stream's NOTIFY inside q's transaction (delivered on
// commit).
func (s *Store) notify(ctx context.Context, q Querier, streamID string) error {
	_, err := q.Exec(ctx, `SELECT helix.announce($1, $2)`, s.shared.opts.notifyChannel, streamID)
	return err
}

// EndStream implements store.StreamStore.
func (s *Store) EndStream(ctx context.Context, streamID string, finalOutput json.RawMessage) error {
	if len(finalOutput) > 0 && !json.Valid(finalOutput) {
		return fmt.Errorf("store: end stream %s: final output is not valid JSON", streamID)
	}
	err := s.streamTx(ctx, func(q Querier) error {
		status, latest, err := lockStream(ctx, q, streamID)
		if err != nil {
			return err
		}
		switch status {
		case helix.StreamEnded:
			return nil
		case helix.StreamFailed:
			return &helix.StreamNotActiveError{StreamID: streamID, Status: status}
		}
		end, err := json.Marshal(&helix.StreamEnd{StreamID: streamID, Timestamp: time.Now().UnixMilli(), FinalOutput: finalOutput})
		if err != nil {
			return err
		}
		seq := latest + 1
		if _, err := q.Exec(ctx, `UPDATE helix.streams SET status = 'ended', final_output = $2, error = NULL,
			latest_seq = $3, updated_at = now() WHERE stream_id = $1`, streamID, rawOrNil(finalOutput), seq); err != nil {
			return err
		}
		if _, err := q.Exec(ctx, `INSERT INTO helix.stream_chunks (stream_key, seq, step, chunk)
			SELECT key, $2, 0, $3 FROM helix.streams WHERE stream_id = $1`,
			streamID, seq, end); err != nil {
			return err
		}
		return s.notify(ctx, q, streamID)
	})
	return wrap(err, "end stream %s", streamID)
}

// FailStream implements store.StreamStore.
func (s *Store) FailStream(ctx context.Context, streamID, message string) error {
	err := s.streamTx(ctx, func(q Querier) error {
		status, _, err := lockStream(ctx, q, streamID)
		if err != nil || status == helix.StreamFailed {
			return err
		}
		if _, err := q.Exec(ctx, `UPDATE helix.streams SET status = 'failed', error = $2, updated_at = now()
			WHERE stream_id = $1`, streamID, message); err != nil {
			return err
		}
		return s.notify(ctx, q, streamID)
	})
	return wrap(err, "fail stream %s", streamID)
}

// ReactivateStream implements store.StreamStore.
func (s *Store) ReactivateStream(ctx context.Context, streamID string) error {
	n, err := s.q.Exec(ctx, `UPDATE helix.streams SET status = 'active', final_output = NULL, error = NULL,
		updated_at = now() WHERE stream_id = $1`, streamID)
	if err == nil && n == 0 {
		err = notFound("stream", streamID)
	}
	return wrap(err, "reactivate stream %s", streamID)
}

// CleanupToStep implements store.StreamStore.
func (s *Store) CleanupToStep(ctx context.Context, streamID string, step int, minSequence int64) (store.CleanupResult, error) {
	res, err := s.cleanup(ctx, nil, streamID, step,
		`step > $2 AND seq > $3`, streamID, step, minSequence)
	return res, wrap(err, "cleanup stream %s to step %d", streamID, step)
}

// cleanup deletes the chunk rows of stream $1 that meet cond after step
// under the stream row lock (see truncate); nothing removed reports a
// zero result.
func (s *Store) cleanup(ctx context.Context, fence *store.Fence, streamID string, step int, cond string, args ...any) (store.CleanupResult, error) {
	var res store.CleanupResult
	err := s.streamTx(ctx, func(q Querier) error {
		if fence != nil {
			// As a fenced append does, and in its order (the workflow's
			// row, then the stream's): a takeover's UPDATE of the row waits
			// for this transaction, and one that came first fences it.
			var owner *string
			err := q.QueryRow(ctx, `SELECT owner_xid FROM dbos.workflow_status WHERE workflow_uuid = $1 FOR SHARE`, fence.WorkflowID).Scan(&owner)
			if err != nil && !isNoRows(err) {
				return err
			}
			if owner == nil || *owner != fence.Owner {
				return store.ErrFenced
			}
		}
		_, latest, err := lockStream(ctx, q, streamID)
		if err != nil {
			return err
		}
		res.AtSequence = latest
		return s.truncate(ctx, q, streamID, step, &res, cond, args...)
	})
	if res.Removed == 0 {
		res = store.CleanupResult{}
	}
	return res, err
}

// ResetStream implements store.StreamStore.
func (s *Store) ResetStream(ctx context.Context, streamID string) error {
	err := s.streamTx(ctx, func(q Querier) error {
		_, latest, err := lockStream(ctx, q, streamID)
		if err != nil {
			return err
		}
		res := store.CleanupResult{AtSequence: latest}
		if err := s.truncate(ctx, q, streamID, 0, &res, `true`, streamID); err != nil {
			return err
		}
		_, err = q.Exec(ctx, `UPDATE helix.streams SET status = 'active', final_output = NULL, error = NULL,
			updated_at = now() WHERE stream_id = $1`, streamID)
		return err
	})
	return wrap(err, "reset stream %s", streamID)
}

// truncate deletes the chunk rows of stream $1 (args[0]) that meet cond
// (on the columns of a chunk row; args are its parameters), and, when it removed chunks, records a truncation epoch
// and wakes readers. A row goes whole: the chunks a row packs share their
// run and step, which is what every delete selects on.
func (s *Store) truncate(ctx context.Context, q Querier, streamID string, step int, res *store.CleanupResult, cond string, args ...any) error {
	var minSeq, maxSeq *int64
	err := q.QueryRow(ctx, `WITH d AS (
			DELETE FROM helix.stream_chunks WHERE stream_key = (SELECT key FROM helix.streams WHERE stream_id = $1) AND `+cond+`
			RETURNING seq, n
		)
		SELECT COALESCE(sum(n), 0), min(seq - n + 1), max(seq) FROM d`, args...).
		Scan(&res.Removed, &minSeq, &maxSeq)
	if err != nil || res.Removed == 0 {
		return err
	}
	res.MinSequence, res.MaxSequence = *minSeq, *maxSeq
	if _, err := q.Exec(ctx, `WITH e AS (
			UPDATE helix.streams SET truncation_epoch = truncation_epoch + 1, updated_at = now()
			WHERE stream_id = $1 RETURNING truncation_epoch
		)
		INSERT INTO helix.stream_truncations (stream_id, epoch, at_step, min_seq, max_seq, at_sequence, removed)
		SELECT $1, e.truncation_epoch, $2, $3, $4, $5, $6 FROM e`,
		streamID, step, res.MinSequence, res.MaxSequence, res.AtSequence, res.Removed); err != nil {
		return err
	}
	return s.notify(ctx, q, streamID)
}

// streamTx runs fn in a transaction on the pool, or directly on the
// caller's transaction for a WithQuerier view (so a durable step can end or
// clean a stream atomically with its other writes). On the pool, it rides
// out transient database errors (a killed connection, a restarting server)
// for up to the retry timeout, as stream writes and reads do: every caller
// (end, fail, clean up, reset) reaches the same end state when repeated.
func (s *Store) streamTx(ctx context.Context, fn func(q Querier) error) error {
	if s.inTx {
		return fn(s.q)
	}
	return retryTransient(ctx, s.shared.opts.retryTimeout, nil, func() error { return s.tx(ctx, fn) }, func(_ int, err error) {
		s.shared.opts.logger.Warn().Err(err).Msg("stream update failed, retrying")
	})
}

// streamUpdatedAtSQL is a stream's last change (StreamInfo.UpdatedAt), for
// table alias s: an append (insertChunksSQL, insertStreamChunksSQL, a step
// commit's chunks) leaves the stream's updated_at alone, its chunks'
// created_at say when it happened, and the newest chunk row's is the last
// append's now(), as updated_at was; every other change (status, end,
// truncation, which deletes chunks) writes updated_at = now(). An append's
// heap-only update of the stream row then changes latest_seq only, and
// its WAL record logs 8 bytes of the row instead of 28 (latest_seq to
// updated_at). The newest chunk is one backward step of the primary key.
var streamUpdatedAtSQL = `GREATEST(s.updated_at, (SELECT c.created_at FROM ` + streamChunksSQL("s", "true", "ORDER BY seq DESC LIMIT 1") + ` c))`

// GetStreamInfo implements store.StreamStore.
func (s *Store) GetStreamInfo(ctx context.Context, streamID string) (*store.StreamInfo, error) {
	var info store.StreamInfo
	var status string
	var final []byte
	err := s.q.QueryRow(ctx, `SELECT stream_id, COALESCE(owner_session_id, ''), status, latest_seq,
			(SELECT COALESCE(sum(c.n), 0) FROM `+streamChunksSQL("s", "true", "")+` c),
			final_output, COALESCE(error, ''), truncation_epoch, created_at, `+streamUpdatedAtSQL+`
		FROM helix.streams s WHERE stream_id = $1`, streamID).
		Scan(&info.StreamID, &info.OwnerSessionID, &status, &info.LatestSequence, &info.ChunkCount, &final,
			&info.Error, &info.TruncationEpoch, &info.CreatedAt, &info.UpdatedAt)
	if isNoRows(err) {
		err = notFound("stream", streamID)
	}
	if err != nil {
		return nil, wrap(err, "get stream info %s", streamID)
	}
	info.Status = helix.StreamStatus(status)
	if len(final) > 0 {
		info.FinalOutput = final
	}
	return &info, nil
}

// ReadChunks implements store.StreamStore.
func (s *Store) ReadChunks(ctx context.Context, streamID string, afterSequence int64, limit int) ([]store.StoredChunk, error) {
	page, _, err := s.fetch(ctx, streamID, afterSequence, pageLimit(limit, readPageSize))
	if err != nil {
		return nil, wrap(err, "read stream %s", streamID)
	}
	return page, nil
}

// readPageSize is how many chunks a reader fetches per query.
const readPageSize = 500

// streamState is what a reader learns about a stream with each fetch.
type streamState struct {
	status helix.StreamStatus
	latest int64
	errMsg string
	epoch  int
}

// fetch reads the stream's state and up to limit chunks after a sequence in
// one query (rows pack several chunks: it reads up to limit rows, and drops
// the chunks of the first row at or before after and those beyond limit).
// A marker row (format 4) is read with its sources (markerSourcesSQL) and
// rendered from them: its chunks and bytes are those of the row it stands
// for, so a read from any sequence inside it gets the same tail.
func (s *Store) fetch(ctx context.Context, streamID string, after int64, limit int) ([]store.StoredChunk, streamState, error) {
	rows, err := s.shared.pool.Query(ctx, `SELECT st.status, st.latest_seq, COALESCE(st.error, ''), st.truncation_epoch,
			c.seq, c.n, COALESCE(c.run_id, ''), c.step, c.attempt, c.chunk, c.created_at,
			src.*
		FROM helix.streams st
		LEFT JOIN LATERAL (
			SELECT * FROM `+streamChunksSQL("st", "seq > $2", "ORDER BY seq LIMIT $3")+` x
		) c ON true
		LEFT JOIN LATERAL (`+markerSourcesSQL+`) src ON true
		WHERE st.stream_id = $1`, streamID, after, limit)
	if err != nil {
		return nil, streamState{}, err
	}
	defer rows.Close()
	var (
		state streamState
		out   []store.StoredChunk
		found bool
	)
	for rows.Next() {
		found = true
		var (
			status  string
			seq     *int64
			n       *int
			step    *int
			attempt *int
			body    []byte
			runID   string
			created *time.Time
			src     markerSources
		)
		if err := rows.Scan(append([]any{&status, &state.latest, &state.errMsg, &state.epoch, &seq, &n, &runID, &step, &attempt,
			&body, &created}, src.dest()...)...); err != nil {
			return nil, streamState{}, err
		}
		state.status = helix.StreamStatus(status)
		if seq == nil || len(out) >= limit {
			continue
		}
		chunks, raws, err := src.unpack(body, *n, streamID, runID, *step, *seq)
		if err != nil {
			return nil, streamState{}, fmt.Errorf("chunk %d: %w", *seq, err)
		}
		first := *seq - int64(len(chunks)) + 1
		for i, c := range chunks {
			at := first + int64(i)
			if at <= after || len(out) >= limit {
				continue
			}
			sc := store.StoredChunk{StreamID: streamID, Sequence: at, RunID: runID, Step: *step, Attempt: *attempt, Chunk: c, Raw: raws[i]}
			if created != nil {
				sc.CreatedAt = *created
			}
			out = append(out, sc)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, streamState{}, err
	}
	if !found {
		return nil, streamState{}, notFound("stream", streamID)
	}
	return out, state, nil
}

// LatestSequence returns the stream's latest sequence number (0 for an empty
// stream) without counting its chunks. Read-only; joins a WithQuerier
// transaction.
func (s *Store) LatestSequence(ctx context.Context, streamID string) (int64, error) {
	var latest int64
	err := s.q.QueryRow(ctx, `SELECT latest_seq FROM helix.streams WHERE stream_id = $1`, streamID).Scan(&latest)
	if isNoRows(err) {
		err = notFound("stream", streamID)
	}
	return latest, wrap(err, "read stream %s", streamID)
}
