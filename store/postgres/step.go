package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/statepatch"
	"github.com/helix-agents/helix-dbos/store"
)

var _ store.StepStore = (*Store)(nil)

// readStepSQL is ReadStep's one statement. The stale check reads the run's
// newest chunk above the session's checkpoint (a lost attempt's chunks
// always follow the last commit, and nothing of the run follows them) by a
// backward scan of the stream's primary key: ORDER BY seq DESC LIMIT 1 keeps
// that plan even as a generic prepared plan, so its cost does not grow with
// the stream.
var readStepSQL = `SELECT s.status, s.step_count, s.message_count, s.custom_state,
		COALESCE(s.checkpoint_id, ''),
		COALESCE(cp.stream_sequence, 0), GREATEST($3, COALESCE(cp.stream_sequence, 0)),
		COALESCE((SELECT c.step > $4 FROM ` + streamChunksSQL("st", "seq > GREATEST($3, COALESCE(cp.stream_sequence, 0)) AND run_id = $2", "ORDER BY seq DESC LIMIT 1") + ` c), false)
	FROM helix.sessions s LEFT JOIN LATERAL (` + sessionCheckpointSQL + `) cp ON true
		LEFT JOIN helix.streams st ON st.stream_id = s.stream_id
	WHERE s.session_id = $1`

// ReadStep implements store.StepStore.
func (s *Store) ReadStep(ctx context.Context, p store.ReadStepParams) (*store.StepView, error) {
	var v store.StepView
	var status string
	err := s.q.QueryRow(ctx, readStepSQL, p.SessionID, p.RunID, p.MinSequence, p.AfterStep).Scan(
		&status, &v.StepCount, &v.MessageCount, &v.CustomState, &v.CheckpointID, &v.CheckpointSequence, &v.StaleFrom, &v.Stale)
	if isNoRows(err) {
		err = notFound("session", p.SessionID)
	}
	if err != nil {
		return nil, wrap(err, "read step of %s", p.SessionID)
	}
	v.Status = helix.SessionStatus(status)
	return &v, nil
}

// CleanupAttempt implements store.StepStore.
func (s *Store) CleanupAttempt(ctx context.Context, fence *store.Fence, streamID, runID string, step int, minSequence int64) (store.CleanupResult, error) {
	res, err := s.cleanup(ctx, fence, streamID, step,
		`seq > $2 AND run_id = $3 AND step > $4`, streamID, minSequence, runID, step)
	return res, wrap(err, "clean up run %s of stream %s after step %d", runID, streamID, step)
}

// lockStepSQL locks the session and its stream (in that order, as every
// transaction that takes both does) and reads what the commit decides on.
// The custom state is read only when patches need it.
const lockStepSQL = `SELECT s.status, s.message_count, CASE WHEN $2 THEN s.custom_state END,
		s.interrupt_requested, COALESCE(s.interrupt_reason, ''), s.stream_id, st.status, st.latest_seq
	FROM helix.sessions s JOIN helix.streams st ON st.stream_id = s.stream_id
	WHERE s.session_id = $1
	FOR UPDATE OF s, st`

// commitStepSQL writes a whole step in one statement, under the locks of
// the session and its stream: taken by lockStepSQL before it, or, when it
// is the transaction's only word on the step (see CommitStep), by its own
// updates of the session and then the stream, whose conditions are the
// checks (an UPDATE re-reads a row changed under it before deciding, so
// no SELECT ... FOR UPDATE, and no WAL record for the lock, is needed).
// $1 session, $2 run, $3 step, $4 message count before, $5 messages, $6
// new custom state (NULL: unchanged), $7 mode ('continue', 'complete' or
// 'interrupt'), $8 output, $9 interrupt context, $10 checkpoint ID, $11
// checkpoint status, $12 how many of the chunks precede the checkpoint, $13
// the usage records (encodeUsage; NULL for none), $14 run status, $15 run
// error, $16 stream, $17 the expected message count (negative: the caller
// decided under lockStepSQL's locks, nothing to check), $18 chunk rows
// (packed by the chunk codec), $19 their steps, $20 their run IDs, $21 end
// the stream, $22 notify channel, $23 the run status is final, $24 the
// rows' chunk counts, $25 the number of chunks, $26 the checkpoint's
// journal (store.StepCommit.Journal; NULL for none), $27 and $28 the
// checkpoint ID's time and random part (the row's key; layout.go). The
// session's key and the stream's come from the rows the statement updates.
//
// The row updates are narrow: a step leaves the session's updated_at (its
// last change is greatest(updated_at, checkpointed_at)) and the stream's
// (the newest chunk row's created_at) alone, so that their heap-only
// updates log fewer bytes.
//
// The messages go in at $4 after the rows there that are not the step's
// own move away (evict: pending model records of other executions, their
// records to helix.step_journal). The step's assistant message (the first
// of $5) keeps the row at $4 that holds it already (the model call's
// record, written as that row): own writes it only when no row is there.
// The session's row is locked by then (sess), and evict reads with a
// snapshot of its own, so no pending row it does not see can be written
// before the commit.
//
// The run's row is written only when its status changes, it ends, or it
// records an error: a running run's step count and last update are read
// from its session's checkpoint (runColumns), which the statement writes
// anyway.
//
// With $17 >= 0 the statement writes only when what the caller assumed
// holds (the session and stream active, no interrupt requested, $17
// messages, the run exists); otherwise it writes nothing and fails with
// SQLSTATE HX412 (helix.refuse_step_commit), and the caller commits the
// step the long way (CommitRefused).
const commitStepSQL = `WITH sess AS (
		UPDATE helix.sessions SET
			status = CASE $7 WHEN 'complete' THEN 'completed' WHEN 'interrupt' THEN 'interrupted' ELSE status END,
			step_count = $3::int,
			message_count = $4::int + cardinality($5::jsonb[]),
			custom_state = COALESCE($6::jsonb, custom_state),
			output = CASE $7 WHEN 'complete' THEN $8::jsonb WHEN 'interrupt' THEN NULL ELSE output END,
			error = CASE WHEN $7 = 'continue' THEN error END,
			failure_reason = CASE WHEN $7 = 'continue' THEN failure_reason END,
			interrupt_context = CASE WHEN $7 = 'interrupt' THEN $9::jsonb ELSE interrupt_context END,
			interrupt_requested = CASE WHEN $7 = 'continue' THEN interrupt_requested ELSE false END,
			interrupt_reason = CASE WHEN $7 = 'continue' THEN interrupt_reason END,
			checkpoint_id = $10, checkpointed_at = now(), checkpoint_source = 'step',
			version = version + 1
		WHERE session_id = $1
			AND ($17::int < 0 OR (status = 'active' AND NOT interrupt_requested AND message_count = $17::int))
		RETURNING version, custom_state, output, key
	), ok AS (
		UPDATE helix.streams SET latest_seq = latest_seq + $25::int,
			status = CASE WHEN $21 THEN 'ended' ELSE status END,
			final_output = CASE WHEN $21 THEN $8::jsonb ELSE final_output END,
			error = CASE WHEN $21 THEN NULL ELSE error END,
			updated_at = CASE WHEN $21 OR $25::int = 0 THEN now() ELSE updated_at END
		WHERE stream_id = $16 AND ($17::int < 0 OR status = 'active') AND EXISTS (SELECT 1 FROM sess)
		RETURNING latest_seq - $25::int AS latest_seq, key
	), evict AS (
		SELECT helix.evict_pending_messages($1, $4::int, ($5::jsonb[])[1]) AS n FROM ok
	), own AS (
		INSERT INTO helix.messages (session_key, seq, message)
		SELECT sess.key, $4::int, ($5::jsonb[])[1] FROM evict, sess WHERE cardinality($5::jsonb[]) > 0
		ON CONFLICT (session_key, seq) DO NOTHING
	), msgs AS (
		INSERT INTO helix.messages (session_key, seq, message)
		SELECT sess.key, $4::int + u.ord - 1, u.m FROM evict, sess, unnest($5::jsonb[]) WITH ORDINALITY AS u(m, ord)
		WHERE u.ord > 1
	), cp AS (
		INSERT INTO helix.checkpoints (session_key, step_count, id_ms, id_rand, run_id, message_count, stream_sequence,
			status, custom_state, output, usage, journal)
		SELECT sess.key, $3::int, $27::bigint, $28::text, $2, $4::int + cardinality($5::jsonb[]), ok.latest_seq + $12::bigint, $11,
			sess.custom_state, CASE WHEN $7 = 'complete' THEN $8::jsonb ELSE sess.output END, $13::json, $26::text
		FROM sess, ok
	), run AS (
		SELECT status FROM helix.runs WHERE run_id = $2
	), runupd AS (
		UPDATE helix.runs SET status = $14, step_count = $3, error = COALESCE($15, error),
			completed_at = CASE WHEN $23 THEN COALESCE(completed_at, now()) END,
			updated_at = now()
		WHERE run_id = $2 AND (status <> $14 OR $23 OR $15::text IS NOT NULL) AND EXISTS (SELECT 1 FROM ok)
	), chunks AS (
		INSERT INTO helix.stream_chunks (stream_key, seq, n, run_id, step, chunk)
		SELECT ok.key, ok.latest_seq + sum(u.n) OVER (ORDER BY u.ord), u.n, NULLIF(u.r, ''), u.s, u.c
		FROM ok, unnest($18::json[], $19::int[], $20::text[], $24::int[]) WITH ORDINALITY AS u(c, s, r, n, ord)
	), note AS (
		SELECT helix.announce($22, $16) FROM ok
	)
	SELECT CASE WHEN EXISTS (SELECT 1 FROM ok) AND ($17::int < 0 OR EXISTS (SELECT 1 FROM run))
			THEN (SELECT version FROM sess) ELSE helix.refuse_step_commit($1) END,
		(SELECT count(*) FROM run), (SELECT count(*) FROM note)`

// CodeCommitRefused is the SQLSTATE of a held step commit whose
// expectations did not hold (commitStepSQL).
const CodeCommitRefused = "HX412"

// CommitRefused reports a step commit that wrote nothing because what its
// caller expected did not hold (store.StepCommit.ExpectMessageCount): the
// transaction is lost; run the step's transaction again with
// [LockedCommit], which decides under the locks.
func CommitRefused(err error) bool { return pgCode(err) == CodeCommitRefused }

type lockedCommitKey struct{}

// LockedCommit returns ctx with which CommitStep locks the session and
// decides before it writes, whatever the commit expects: the way to commit
// a step after CommitRefused.
func LockedCommit(ctx context.Context) context.Context {
	return context.WithValue(ctx, lockedCommitKey{}, true)
}

func lockedCommit(ctx context.Context) bool {
	v, _ := ctx.Value(lockedCommitKey{}).(bool)
	return v
}

// Commit modes of commitStepSQL.
const (
	commitContinue  = "continue"
	commitComplete  = "complete"
	commitInterrupt = "interrupt"
)

// CommitStep implements store.StepStore.
func (s *Store) CommitStep(ctx context.Context, c store.StepCommit) (*store.StepCommitResult, error) {
	if c.SessionID == "" || c.RunID == "" {
		return nil, errors.New("store: commit step: session ID and run ID are required")
	}
	if c.Step < 0 {
		return nil, fmt.Errorf("store: commit step of %s: step must be >= 0, got %d", c.SessionID, c.Step)
	}
	if len(c.Output) > 0 && !json.Valid(c.Output) {
		return nil, fmt.Errorf("store: commit step of %s: output is not valid JSON", c.SessionID)
	}
	msgs, err := encodeMessages(c.Messages)
	if err != nil {
		return nil, fmt.Errorf("store: commit step of %s: %w", c.SessionID, err)
	}
	usage, err := encodeUsage(c.RunID, c.Step, c.Usage)
	if err != nil {
		return nil, fmt.Errorf("store: commit step of %s: %w", c.SessionID, err)
	}
	if c.ExpectMessageCount > 0 && c.StreamID != "" && len(c.Patches) == 0 && !c.ReadInbox && !lockedCommit(ctx) {
		if d, ok := s.q.(Deferrer); ok {
			res, err := s.commitHeld(ctx, d, c, msgs, usage)
			return res, wrap(err, "commit step %d of %s", c.Step, c.SessionID)
		}
	}
	var res store.StepCommitResult
	err = s.tx(ctx, func(q Querier) error {
		if c.ClearSuspension {
			if err := clearSuspension(ctx, q, c.SessionID); err != nil {
				return err
			}
		}
		var (
			status, streamID, streamStatus string
			count                          int
			custom                         []byte
			interrupt                      bool
			reason                         string
			latest                         int64
		)
		err := q.QueryRow(ctx, lockStepSQL, c.SessionID, len(c.Patches) > 0).Scan(
			&status, &count, &custom, &interrupt, &reason, &streamID, &streamStatus, &latest)
		if isNoRows(err) {
			return notFound("session", c.SessionID)
		}
		if err != nil {
			return err
		}
		if helix.SessionStatus(status) != helix.SessionActive {
			return fmt.Errorf("session %s is %s (aborted or ended while step %d ran): the step is discarded", c.SessionID, status, c.Step)
		}
		if helix.StreamStatus(streamStatus) != helix.StreamActive {
			return &helix.StreamNotActiveError{StreamID: streamID, Status: helix.StreamStatus(streamStatus)}
		}
		var next []byte
		if len(c.Patches) > 0 {
			if next, res.Warnings, err = statepatch.Apply(custom, c.Patches); err != nil {
				return err
			}
		}
		complete := c.Complete
		if c.ReadInbox {
			inbox, err := takeInbox(ctx, q, c.SessionID)
			if err != nil {
				return err
			}
			if len(inbox) > 0 {
				enc, err := encodeMessages(inbox)
				if err != nil {
					return err
				}
				res.Inbox = inbox
				msgs = append(slices.Clip(msgs), enc...)
				if complete {
					complete, res.Continued = false, true // a message arrived: read it before finishing
				}
			}
		}
		mode := commitContinue
		switch {
		case complete:
			mode = commitComplete
		case interrupt:
			mode = commitInterrupt
			res.Interrupted, res.InterruptReason = true, reason
		}
		w, err := s.stepWrite(c, streamID, count, msgs, usage, latest, mode, &res)
		if err != nil {
			return err
		}
		w.next = next
		var runs, notified int64
		if err := q.QueryRow(ctx, commitStepSQL, w.args(c, usage, -1)...).Scan(&res.Version, &runs, &notified); err != nil {
			return err
		}
		if runs == 0 {
			return notFound("run", c.RunID)
		}
		if c.RefStatus != "" && !res.Continued {
			return setOwnRef(ctx, q, c.SessionID, c.RefStatus)
		}
		return nil
	})
	if err != nil {
		return nil, wrap(err, "commit step %d of %s", c.Step, c.SessionID)
	}
	return &res, nil
}

// commitHeld is CommitStep as one held statement (commitStepSQL with its
// own locks and checks) on a querier that holds writes: the step's
// transaction sends it with its next statement (the step journal: its
// records and COMMIT), so the whole commit is one round trip. It assumes
// what the caller expects (ExpectMessageCount, StreamID) and what is the
// rule (no interrupt requested, session and stream active); when that does
// not hold, the statement writes nothing and fails with CommitRefused, and
// the caller runs the commit again with LockedCommit. The result has no
// Version, CheckpointSequence or LatestSequence (zero).
func (s *Store) commitHeld(ctx context.Context, d Deferrer, c store.StepCommit, msgs []string, usage []byte) (*store.StepCommitResult, error) {
	if c.ClearSuspension {
		if err := clearSuspension(ctx, d, c.SessionID); err != nil {
			return nil, err
		}
	}
	mode := commitContinue
	if c.Complete {
		mode = commitComplete
	}
	var res store.StepCommitResult
	w, err := s.stepWrite(c, c.StreamID, c.ExpectMessageCount, msgs, usage, 0, mode, &res)
	if err != nil {
		return nil, err
	}
	res.CheckpointSequence, res.LatestSequence = 0, 0 // not known before the statement runs
	d.Defer(ctx, commitStepSQL, w.args(c, usage, c.ExpectMessageCount)...)
	if c.RefStatus != "" {
		if err := setOwnRef(ctx, d, c.SessionID, c.RefStatus); err != nil {
			return nil, err
		}
	}
	return &res, nil
}

// stepWrite is what commitStepSQL writes for a commit decided in mode.
type stepWrite struct {
	count         int
	msgs          []string
	next          []byte
	mode          string
	reason        string
	checkpointID  string
	cpStatus      helix.SessionStatus
	runStatus     helix.RunStatus
	interruptCtx  []byte
	output        []byte
	end           bool
	streamID      string
	beforeCheckpt int
	packed        packedChunks
	chunks        int
	channel       string
	journal       *string
	// idMillis and idRandom are checkpointID's parts its row stores
	// (commitStepSQL's $27 and $28).
	idMillis int64
	idRandom string
}

// stepWrite renders a commit decided in mode, with count messages before
// it and msgs its own (inbox messages included): it fills res's
// checkpoint ID and message count, and its sequences from latest (the
// stream's latest sequence before the commit), renders the chunks,
// closing ones included (res's StepClosing decided; as marker rows where
// they render back from msgs, usage and the checkpoint: the chunk codec),
// and the
// checkpoint's journal (c.Journal, given res).
func (s *Store) stepWrite(c store.StepCommit, streamID string, count int, msgs []string, usage []byte, latest int64, mode string, res *store.StepCommitResult) (*stepWrite, error) {
	res.CheckpointID = helix.GenerateCheckpointID(c.SessionID, c.Step)
	res.MessageCount = count + len(msgs)
	parts, err := checkpointIDParts(c.SessionID, res.CheckpointID)
	if err != nil {
		return nil, err
	}
	w := &stepWrite{count: count, msgs: msgs, mode: mode, reason: res.InterruptReason, checkpointID: res.CheckpointID,
		streamID: streamID, cpStatus: helix.SessionActive, runStatus: helix.RunRunning, channel: s.shared.opts.notifyChannel,
		idMillis: parts.Timestamp, idRandom: parts.Random}
	chunks := newChunkBatch(streamID, latest)
	if err := chunks.add(c.RunID, c.Chunks...); err != nil {
		return nil, err
	}
	w.beforeCheckpt = len(chunks.chunks)
	res.CheckpointSequence = chunks.last()
	if c.Closing != nil {
		if err := chunks.add(c.RunID, c.Closing(res.StepClosing)...); err != nil {
			return nil, err
		}
	}
	if mode == commitComplete {
		w.cpStatus, w.runStatus, w.output = helix.SessionCompleted, helix.RunCompleted, rawOrNil(c.Output)
		if w.end = c.EndStream; w.end {
			if err := chunks.addStreamEnd(c.Output); err != nil {
				return nil, err
			}
		}
	}
	res.LatestSequence = chunks.last()
	if mode == commitInterrupt {
		w.runStatus = helix.RunInterrupted
		var err error
		if w.interruptCtx, err = jsonOrNil(store.InterruptContext{Reason: res.InterruptReason, StepCount: c.Step, Timestamp: time.Now().UnixMilli()}); err != nil {
			return nil, err
		}
	}
	var marker *markerWrite
	if c.AgentType != "" {
		marker = markerFor(c, res.CheckpointID, msgs, usage)
	}
	packed, err := chunks.pack(marker)
	if err != nil {
		return nil, err
	}
	w.packed, w.chunks = packed, len(chunks.chunks)
	if c.Journal != nil {
		j, err := c.Journal(*res)
		if err != nil {
			return nil, fmt.Errorf("render the checkpoint's journal: %w", err)
		}
		w.journal = &j
	}
	return w, nil
}

// args returns commitStepSQL's arguments; expect is its $17.
func (w *stepWrite) args(c store.StepCommit, usage []byte, expect int) []any {
	var runErr any
	if w.mode == commitInterrupt {
		runErr = nullIfEmpty(w.reason)
	}
	return []any{c.SessionID, c.RunID, c.Step, w.count, w.msgs, w.next, w.mode, w.output, w.interruptCtx,
		w.checkpointID, string(w.cpStatus), w.beforeCheckpt, usage, string(w.runStatus), runErr,
		w.streamID, expect, w.packed.bodies, w.packed.steps, w.packed.runIDs, w.end, w.channel, w.runStatus.Final(),
		w.packed.counts, w.chunks, w.journal, w.idMillis, w.idRandom}
}

// takeInbox marks a session's unread inbox messages read and returns them
// in the order they were sent.
func takeInbox(ctx context.Context, q Querier, sessionID string) ([]helix.Message, error) {
	rows, err := q.Query(ctx, `UPDATE helix.inbox SET consumed_at = now()
		WHERE session_id = $1 AND consumed_at IS NULL RETURNING seq, message`, sessionID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	type item struct {
		seq int64
		msg helix.Message
	}
	var items []item
	for rows.Next() {
		var it item
		var raw []byte
		if err := rows.Scan(&it.seq, &raw); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, &it.msg); err != nil {
			return nil, fmt.Errorf("decode inbox message %d of %s: %w", it.seq, sessionID, err)
		}
		items = append(items, it)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(items, func(a, b item) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]helix.Message, len(items))
	for i, it := range items {
		out[i] = it.msg
	}
	return out, nil
}

// setOwnRef moves a child session's reference on its parent to status (a
// final status stamps the completion time once): held for the
// transaction's next statement when q holds writes.
func setOwnRef(ctx context.Context, q Querier, sessionID string, status helix.SubSessionStatus) error {
	if !status.Valid() {
		return fmt.Errorf("unknown sub-session status %q", status)
	}
	return execLater(ctx, q, `UPDATE helix.sub_session_refs r SET status = $2,
			completed_at = CASE WHEN $2 IN ('completed', 'failed', 'terminated') THEN COALESCE(r.completed_at, now()) END,
			updated_at = now()
		FROM helix.sessions s
		WHERE s.session_id = $1 AND r.session_id = s.parent_session_id AND r.sub_session_id = s.session_id`,
		sessionID, string(status))
}

// chunkBatch collects encoded chunks of one stream with their sequences.
type chunkBatch struct {
	streamID string
	latest   int64
	chunks   []encodedChunk
}

func newChunkBatch(streamID string, latest int64) *chunkBatch {
	return &chunkBatch{streamID: streamID, latest: latest}
}

func (b *chunkBatch) add(runID string, chunks ...helix.Chunk) error {
	for _, c := range chunks {
		e, err := encodeChunk(b.streamID, c, runID, 0)
		if err != nil {
			return err
		}
		b.chunks = append(b.chunks, e)
	}
	return nil
}

func (b *chunkBatch) addStreamEnd(output json.RawMessage) error {
	end, err := json.Marshal(&helix.StreamEnd{StreamID: b.streamID, Timestamp: time.Now().UnixMilli(), FinalOutput: output})
	if err != nil {
		return err
	}
	b.chunks = append(b.chunks, encodedChunk{streamID: b.streamID, raw: end})
	return nil
}

// last is the sequence of the last chunk added (the stream's latest before
// the batch when it is empty).
func (b *chunkBatch) last() int64 { return b.latest + int64(len(b.chunks)) }

// packedChunks is a batch's rows as commitStepSQL's $18, $19, $20 and $24.
// The slices are non-nil: pgx sends a nil slice as NULL.
type packedChunks struct {
	bodies []string
	steps  []int32
	runIDs []string
	counts []int32
}

// pack packs the batch's chunks; the rows of marker's run and step become
// marker rows where they can (nil marker: none).
func (b *chunkBatch) pack(marker *markerWrite) (packedChunks, error) {
	rows, err := packChunksWith(b.chunks, marker)
	if err != nil {
		return packedChunks{}, err
	}
	p := packedChunks{bodies: make([]string, len(rows)), steps: make([]int32, len(rows)),
		runIDs: make([]string, len(rows)), counts: make([]int32, len(rows))}
	for i, r := range rows {
		p.bodies[i], p.steps[i], p.runIDs[i], p.counts[i] = r.body, int32(r.step), r.runID, int32(r.n)
	}
	return p, nil
}

// encodeUsage renders a step's usage records as checkpoints.usage: a JSON array of records with one-letter fields, and
// without what the checkpoint row says already (its run and step, and
// them in the key, written "~"). NULL (nil) when there are none.
func encodeUsage(runID string, step int, rows []store.UsageRecord) ([]byte, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	out := make([]compactUsage, len(rows))
	for i, r := range rows {
		if r.SourceType == "" || r.Key == "" {
			return nil, fmt.Errorf("usage row %d needs a source type and key", i)
		}
		rid, rstep := cmp.Or(r.RunID, runID), cmp.Or(r.Step, step)
		u := compactUsage{T: r.SourceType, N: r.SourceName, I: r.InputTokens, O: r.OutputTokens, C: r.CachedTokens,
			W: r.CacheWriteTokens, V: r.Value, D: r.DurationMS, E: !r.Success}
		if rid != runID {
			u.R = rid
		}
		if rstep != step {
			u.P = &rstep
		}
		if full := ":" + rid + ":" + strconv.Itoa(rstep); !strings.Contains(r.Key, "~") && strings.Count(r.Key, full) == 1 {
			u.K = strings.Replace(r.Key, full, "~", 1)
		} else {
			u.KeyAsIs = r.Key
		}
		out[i] = u
	}
	return json.Marshal(out)
}

// compactUsage is one record of checkpoints.usage (helix.checkpoint_usage
// reads them back).
type compactUsage struct {
	T       string   `json:"t"`
	N       string   `json:"n,omitempty"`
	I       int      `json:"i,omitempty"`
	O       int      `json:"o,omitempty"`
	C       int      `json:"c,omitempty"`
	W       int      `json:"w,omitempty"`
	V       *float64 `json:"v,omitempty"`
	D       *int64   `json:"d,omitempty"`
	E       bool     `json:"e,omitempty"`
	R       string   `json:"r,omitempty"`
	P       *int     `json:"p,omitempty"`
	K       string   `json:"k,omitempty"`
	KeyAsIs string   `json:"K,omitempty"`
}
