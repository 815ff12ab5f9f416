package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

func scanCheckpoint(row Row) (*store.Checkpoint, error) {
	var c store.Checkpoint
	var status string
	var output []byte
	if err := row.Scan(&c.ID, &c.SessionID, &c.RunID, &c.StepCount, &c.MessageCount, &c.StreamSequence,
		&status, &c.CustomState, &output, &c.CreatedAt); err != nil {
		return nil, err
	}
	c.Status = helix.SessionStatus(status)
	if len(output) > 0 {
		c.Output = output
	}
	return &c, nil
}

// insertCheckpoint writes a checkpoint of st (already updated to point at
// id) with the given parameters, defaulting to st's current values. A
// checkpoint with the same ID is returned as stored. id must be one of
// the session's own checkpoint IDs (checkpointIDParts).
func insertCheckpoint(ctx context.Context, q Querier, st *store.SessionState, id string, p store.CheckpointParams) (*store.Checkpoint, error) {
	if p.StepCount < 0 {
		return nil, fmt.Errorf("checkpoint step count must be >= 0, got %d", p.StepCount)
	}
	messageCount := p.MessageCount
	if messageCount < 0 {
		messageCount = st.MessageCount
	}
	if messageCount > st.MessageCount {
		return nil, fmt.Errorf("checkpoint message count %d exceeds the session's %d messages", messageCount, st.MessageCount)
	}
	status := cmp.Or(p.Status, st.Status)
	if !status.Valid() {
		return nil, fmt.Errorf("checkpoint status %q is unknown", status)
	}
	custom := p.CustomState
	if len(custom) == 0 {
		custom = st.CustomState
	}
	output := p.Output
	if len(output) == 0 {
		output = st.Output
	}
	if len(output) > 0 && !json.Valid(output) {
		return nil, fmt.Errorf("checkpoint output is not valid JSON")
	}
	parts, err := checkpointIDParts(st.SessionID, id)
	if err != nil {
		return nil, err
	}
	cp, err := scanCheckpoint(q.QueryRow(ctx, `INSERT INTO helix.checkpoints AS c
			(session_key, step_count, id_ms, id_rand, run_id, message_count, stream_sequence, status, custom_state, output)
			SELECT s.key, $3, $9, $10, $2, $4, $5, $6, $7, $8 FROM helix.sessions s WHERE s.session_id = $1
			ON CONFLICT DO NOTHING RETURNING `+checkpointColumnsOf("$1")+``,
		st.SessionID, nullIfEmpty(p.RunID), p.StepCount, messageCount, p.StreamSequence, string(status),
		[]byte(custom), rawOrNil(output), parts.Timestamp, parts.Random))
	if isNoRows(err) {
		cp, err = getCheckpoint(ctx, q, id)
	}
	return cp, err
}

// getCheckpointSQL looks checkpoint ID $1 of session $2 up by its parts
// (a primary-key look-up). An ID that names another session, or a
// session that is gone, finds nothing.
var getCheckpointSQL = `SELECT ` + checkpointColumnsOf("s.session_id") + `
	FROM helix.sessions s JOIN helix.checkpoints c ON ` + checkpointIDMatchSQL("s", "$1") + `
	WHERE s.session_id = $2`

func getCheckpoint(ctx context.Context, q Querier, id string) (*store.Checkpoint, error) {
	p, err := helix.ParseCheckpointID(id)
	if err != nil {
		return nil, notFound("checkpoint", id)
	}
	cp, err := scanCheckpoint(q.QueryRow(ctx, getCheckpointSQL, id, p.SessionID))
	if isNoRows(err) {
		return nil, notFound("checkpoint", id)
	}
	return cp, err
}

// CreateCheckpoint implements store.Checkpoints.
func (s *Store) CreateCheckpoint(ctx context.Context, sessionID string, p store.CheckpointParams) (*store.Checkpoint, error) {
	id := cmp.Or(p.ID, helix.GenerateCheckpointID(sessionID, p.StepCount))
	var cp *store.Checkpoint
	err := s.tx(ctx, func(q Querier) error {
		st, err := s.loadState(ctx, q, sessionID, true)
		if err != nil {
			return err
		}
		if cp, err = insertCheckpoint(ctx, q, st, id, p); err != nil {
			return err
		}
		_, err = q.Exec(ctx, `UPDATE helix.sessions SET checkpoint_id = $2, checkpointed_at = now(),
			checkpoint_source = $3, version = version + 1, updated_at = now() WHERE session_id = $1`,
			sessionID, id, cmp.Or(p.Source, "save"))
		return err
	})
	return cp, wrap(err, "create checkpoint for %s", sessionID)
}

// GetCheckpoint implements store.Checkpoints.
func (s *Store) GetCheckpoint(ctx context.Context, checkpointID string) (*store.Checkpoint, error) {
	cp, err := getCheckpoint(ctx, s.q, checkpointID)
	return cp, wrap(err, "get checkpoint %s", checkpointID)
}

// GetLatestCheckpoint implements store.Checkpoints: the checkpoint the
// session's pointer names, else (a dangling pointer) the newest by write
// order.
func (s *Store) GetLatestCheckpoint(ctx context.Context, sessionID string) (*store.Checkpoint, error) {
	cp, err := scanCheckpoint(s.q.QueryRow(ctx, `SELECT `+checkpointColumnsOf("s.session_id")+`
		FROM helix.sessions s JOIN helix.checkpoints c ON c.session_key = s.key
		WHERE s.session_id = $1
		ORDER BY (helix.checkpoint_id_of(s.session_id, c.step_count, c.id_ms, c.id_rand) = s.checkpoint_id) DESC NULLS LAST,
			c.created_seq DESC
		LIMIT 1`, sessionID))
	if isNoRows(err) {
		var exists bool
		if err = s.q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM helix.sessions WHERE session_id = $1)`, sessionID).Scan(&exists); err == nil {
			if exists {
				err = notFound("checkpoint of session", sessionID)
			} else {
				err = notFound("session", sessionID)
			}
		}
	}
	return cp, wrap(err, "get latest checkpoint of %s", sessionID)
}

// ListCheckpoints implements store.Checkpoints.
func (s *Store) ListCheckpoints(ctx context.Context, sessionID string, opts *store.ListOptions) (*store.CheckpointPage, error) {
	var o store.ListOptions
	if opts != nil {
		o = *opts
	}
	if o.Offset < 0 {
		return nil, fmt.Errorf("store: list checkpoints of %s: offset must be >= 0, got %d", sessionID, o.Offset)
	}
	limit := pageLimit(o.Limit, store.DefaultCheckpointPageSize)
	page := &store.CheckpointPage{Items: []store.Checkpoint{}}
	if err := s.q.QueryRow(ctx, `SELECT count(*) FROM helix.sessions s JOIN helix.checkpoints c ON c.session_key = s.key
		WHERE s.session_id = $1`, sessionID).Scan(&page.Total); err != nil {
		return nil, wrap(err, "list checkpoints of %s", sessionID)
	}
	rows, err := s.q.Query(ctx, `SELECT `+checkpointColumnsOf("s.session_id")+`
		FROM helix.sessions s JOIN helix.checkpoints c ON c.session_key = s.key WHERE s.session_id = $1
		ORDER BY c.created_seq LIMIT $2 OFFSET $3`, sessionID, limit, o.Offset)
	if err != nil {
		return nil, wrap(err, "list checkpoints of %s", sessionID)
	}
	defer rows.Close()
	for rows.Next() {
		cp, err := scanCheckpoint(rows)
		if err != nil {
			return nil, wrap(err, "list checkpoints of %s", sessionID)
		}
		page.Items = append(page.Items, *cp)
	}
	page.HasMore = o.Offset+len(page.Items) < page.Total
	return page, wrap(rows.Err(), "list checkpoints of %s", sessionID)
}

// GetCheckpointMessages implements store.Checkpoints.
func (s *Store) GetCheckpointMessages(ctx context.Context, checkpointID string) ([]helix.Message, error) {
	cp, err := getCheckpoint(ctx, s.q, checkpointID)
	if err != nil {
		return nil, wrap(err, "get checkpoint messages %s", checkpointID)
	}
	rows, err := s.q.Query(ctx, `SELECT m.message FROM helix.sessions s, LATERAL `+sessionMessagesSQL("s", "seq < $2", "")+` m
		WHERE s.session_id = $1 ORDER BY m.seq`, cp.SessionID, cp.MessageCount)
	if err != nil {
		return nil, wrap(err, "get checkpoint messages %s", checkpointID)
	}
	defer rows.Close()
	out := make([]helix.Message, 0, cp.MessageCount)
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return nil, wrap(err, "get checkpoint messages %s", checkpointID)
		}
		var m helix.Message
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("store: get checkpoint messages %s: decode: %w", checkpointID, err)
		}
		out = append(out, m)
	}
	return out, wrap(rows.Err(), "get checkpoint messages %s", checkpointID)
}
