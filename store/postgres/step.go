package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
const readStepSQL = `SELECT s.status, s.step_count, s.message_count, s.custom_state, COALESCE(s.checkpoint_id, ''),
		COALESCE(cp.stream_sequence, 0), GREATEST($3, COALESCE(cp.stream_sequence, 0)),
		COALESCE((SELECT c.step > $4 FROM helix.stream_chunks c
			WHERE c.stream_id = s.stream_id AND c.seq > GREATEST($3, COALESCE(cp.stream_sequence, 0)) AND c.run_id = $2
			ORDER BY c.seq DESC LIMIT 1), false)
	FROM helix.sessions s LEFT JOIN helix.checkpoints cp ON cp.checkpoint_id = s.checkpoint_id
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
func (s *Store) CleanupAttempt(ctx context.Context, streamID, runID string, step int, minSequence int64) (store.CleanupResult, error) {
	res, err := s.cleanup(ctx, streamID, step,
		`DELETE FROM helix.stream_chunks WHERE stream_id = $1 AND seq > $2 AND run_id = $3 AND step > $4 RETURNING seq`,
		streamID, minSequence, runID, step)
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

// commitStepSQL writes a whole step in one statement. $1 session, $2 run,
// $3 step, $4 message count before, $5 messages, $6 new custom state (NULL:
// unchanged), $7 mode ('continue', 'complete' or 'interrupt'), $8 output,
// $9 interrupt context, $10 checkpoint ID, $11 checkpoint status, $12
// checkpoint stream sequence, $13 usage rows (JSON), $14 run status, $15
// run error, $16 stream, $17 first chunk sequence, $18 chunks, $19 chunk
// steps, $20 chunk run IDs, $21 end the stream, $22 notify channel, $23 the
// run status is final.
const commitStepSQL = `WITH msgs AS (
		INSERT INTO helix.messages (session_id, seq, message)
		SELECT $1, $4::int + u.ord - 1, u.m FROM unnest($5::jsonb[]) WITH ORDINALITY AS u(m, ord)
	), sess AS (
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
			version = version + 1, updated_at = now()
		WHERE session_id = $1
		RETURNING version, custom_state, output
	), cp AS (
		INSERT INTO helix.checkpoints
			(checkpoint_id, session_id, run_id, step_count, message_count, stream_sequence, status, custom_state, output)
		SELECT $10, $1, $2, $3::int, $4::int + cardinality($5::jsonb[]), $12::bigint, $11, sess.custom_state,
			CASE WHEN $7 = 'complete' THEN $8::jsonb ELSE sess.output END
		FROM sess
	), usage AS (
		INSERT INTO helix.usage (session_id, run_id, step, source_type, source_name, input_tokens, output_tokens,
			cached_tokens, cache_write_tokens, value, duration_ms, success, key)
		SELECT $1, COALESCE(NULLIF(u."runId", ''), $2), COALESCE(NULLIF(u.step, 0), $3), u."sourceType", NULLIF(u."sourceName", ''),
			COALESCE(u."inputTokens", 0), COALESCE(u."outputTokens", 0), COALESCE(u."cachedTokens", 0),
			COALESCE(u."cacheWriteTokens", 0), u.value, u."durationMs", u.success, u.key
		FROM jsonb_to_recordset($13::jsonb) AS u("runId" text, step int, "sourceType" text, "sourceName" text,
			"inputTokens" int, "outputTokens" int, "cachedTokens" int, "cacheWriteTokens" int, value float8,
			"durationMs" bigint, success boolean, key text)
		ON CONFLICT (session_id, key) DO NOTHING
	), run AS (
		UPDATE helix.runs SET status = $14, step_count = $3, error = COALESCE($15, error),
			completed_at = CASE WHEN $23 THEN COALESCE(completed_at, now()) END,
			updated_at = now()
		WHERE run_id = $2
		RETURNING 1
	), chunks AS (
		INSERT INTO helix.stream_chunks (stream_id, seq, run_id, step, chunk)
		SELECT $16::text, $17::bigint + u.ord - 1, NULLIF(u.r, ''), u.s, u.c
		FROM unnest($18::json[], $19::int[], $20::text[]) WITH ORDINALITY AS u(c, s, r, ord)
	), strm AS (
		UPDATE helix.streams SET latest_seq = $17::bigint + cardinality($18::json[]) - 1,
			status = CASE WHEN $21 THEN 'ended' ELSE status END,
			final_output = CASE WHEN $21 THEN $8::jsonb ELSE final_output END,
			error = CASE WHEN $21 THEN NULL ELSE error END,
			updated_at = now()
		WHERE stream_id = $16
	), note AS (
		SELECT pg_notify($22, $16)
	)
	SELECT sess.version, (SELECT count(*) FROM run), (SELECT count(*) FROM note) FROM sess`

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
	usage, err := encodeUsage(c.Usage)
	if err != nil {
		return nil, fmt.Errorf("store: commit step of %s: %w", c.SessionID, err)
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
		res.CheckpointID = helix.GenerateCheckpointID(c.SessionID, c.Step)
		res.MessageCount = count + len(msgs)

		chunks := newChunkBatch(streamID, latest)
		if err := chunks.add(c.RunID, c.Chunks...); err != nil {
			return err
		}
		res.CheckpointSequence = chunks.last()
		if c.Closing != nil {
			if err := chunks.add(c.RunID, c.Closing(res.StepClosing)...); err != nil {
				return err
			}
		}
		end := complete && c.EndStream
		if end {
			if err := chunks.addStreamEnd(c.Output); err != nil {
				return err
			}
		}
		res.LatestSequence = chunks.last()

		cpStatus, runStatus := helix.SessionActive, helix.RunRunning
		var interruptCtx []byte
		var runErr any
		switch mode {
		case commitComplete:
			cpStatus, runStatus = helix.SessionCompleted, helix.RunCompleted
		case commitInterrupt:
			runStatus, runErr = helix.RunInterrupted, nullIfEmpty(reason)
			if interruptCtx, err = jsonOrNil(store.InterruptContext{Reason: reason, StepCount: c.Step, Timestamp: time.Now().UnixMilli()}); err != nil {
				return err
			}
		}
		var output []byte
		if complete {
			output = rawOrNil(c.Output)
		}
		var runs, notified int64
		if err := q.QueryRow(ctx, commitStepSQL,
			c.SessionID, c.RunID, c.Step, count, msgs, next, mode, output, interruptCtx,
			res.CheckpointID, string(cpStatus), res.CheckpointSequence, usage, string(runStatus), runErr,
			streamID, latest+1, chunks.raws, chunks.steps, chunks.runIDs, end, s.shared.opts.notifyChannel, runStatus.Final(),
		).Scan(&res.Version, &runs, &notified); err != nil {
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
// final status stamps the completion time once).
func setOwnRef(ctx context.Context, q Querier, sessionID string, status helix.SubSessionStatus) error {
	if !status.Valid() {
		return fmt.Errorf("unknown sub-session status %q", status)
	}
	_, err := q.Exec(ctx, `UPDATE helix.sub_session_refs r SET status = $2,
			completed_at = CASE WHEN $2 IN ('completed', 'failed', 'terminated') THEN COALESCE(r.completed_at, now()) END,
			updated_at = now()
		FROM helix.sessions s
		WHERE s.session_id = $1 AND r.session_id = s.parent_session_id AND r.sub_session_id = s.session_id`,
		sessionID, string(status))
	return err
}

// chunkBatch collects encoded chunks of one stream with their sequences.
type chunkBatch struct {
	streamID string
	latest   int64
	raws     []string
	steps    []int32
	runIDs   []string
}

// newChunkBatch starts an empty batch. Its slices are non-nil: pgx sends a
// nil slice as NULL, and commitStepSQL's cardinality($18) would then set the
// stream's latest_seq to NULL on a commit without chunks.
func newChunkBatch(streamID string, latest int64) *chunkBatch {
	return &chunkBatch{streamID: streamID, latest: latest, raws: []string{}, steps: []int32{}, runIDs: []string{}}
}

func (b *chunkBatch) add(runID string, chunks ...helix.Chunk) error {
	for _, c := range chunks {
		e, err := encodeChunk(b.streamID, c, runID, 0)
		if err != nil {
			return err
		}
		b.raws, b.steps, b.runIDs = append(b.raws, string(e.raw)), append(b.steps, int32(e.step)), append(b.runIDs, runID)
	}
	return nil
}

func (b *chunkBatch) addStreamEnd(output json.RawMessage) error {
	end, err := json.Marshal(&helix.StreamEnd{StreamID: b.streamID, Timestamp: time.Now().UnixMilli(), FinalOutput: output})
	if err != nil {
		return err
	}
	b.raws, b.steps, b.runIDs = append(b.raws, string(end)), append(b.steps, 0), append(b.runIDs, "")
	return nil
}

// last is the sequence of the last chunk added (the stream's latest before
// the batch when it is empty).
func (b *chunkBatch) last() int64 { return b.latest + int64(len(b.raws)) }

// encodeUsage renders usage rows as the JSON array commitStepSQL reads.
func encodeUsage(rows []store.UsageRecord) ([]byte, error) {
	for i, r := range rows {
		if r.SourceType == "" || r.Key == "" {
			return nil, fmt.Errorf("usage row %d needs a source type and key", i)
		}
	}
	if rows == nil {
		rows = []store.UsageRecord{}
	}
	return json.Marshal(rows)
}
