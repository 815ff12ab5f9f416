package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// encodeMessages validates and marshals messages for a jsonb[] parameter.
func encodeMessages(msgs []helix.Message) ([]string, error) {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		b, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		out[i] = string(b)
	}
	return out, nil
}

// insertMessagesSQL writes messages $3 of session $1 from seq $2, for a
// caller that holds the session's row lock and has read its message count:
// the pending model records at the messages' places move away first.
const insertMessagesSQL = `WITH ev AS (SELECT helix.evict_pending_messages($1, $2) AS n),
		k AS (SELECT key FROM helix.sessions, ev WHERE session_id = $1)
	INSERT INTO helix.messages (session_key, seq, message)
	SELECT k.key, $2 + u.ord - 1, u.m FROM k, unnest($3::jsonb[]) WITH ORDINALITY AS u(m, ord)`

// AppendMessages implements store.Messages.
func (s *Store) AppendMessages(ctx context.Context, sessionID string, msgs []helix.Message) (int, error) {
	enc, err := encodeMessages(msgs)
	if err != nil {
		return 0, fmt.Errorf("store: append messages to %s: %w", sessionID, err)
	}
	var count int
	// The session's row is updated (locked) first, then the pending model
	// records at the new messages' places are moved away, then the
	// messages go in.
	err = s.q.QueryRow(ctx, `WITH s AS (
			UPDATE helix.sessions SET message_count = message_count + $2, version = version + 1, updated_at = now()
			WHERE session_id = $1 RETURNING message_count, key
		), ev AS (
			SELECT helix.evict_pending_messages($1, s.message_count - $2) AS n FROM s
		), ins AS (
			INSERT INTO helix.messages (session_key, seq, message)
			SELECT s.key, s.message_count - $2 + u.ord - 1, u.m FROM s, ev, unnest($3::jsonb[]) WITH ORDINALITY AS u(m, ord)
		)
		SELECT message_count FROM s`, sessionID, len(enc), enc).Scan(&count)
	if isNoRows(err) {
		err = notFound("session", sessionID)
	}
	return count, wrap(err, "append messages to %s", sessionID)
}

// GetMessages implements store.Messages.
func (s *Store) GetMessages(ctx context.Context, sessionID string, opts *store.GetMessagesOptions) (*store.MessagePage, error) {
	var o store.GetMessagesOptions
	if opts != nil {
		o = *opts
	}
	if o.Offset < 0 {
		return nil, fmt.Errorf("store: get messages of %s: offset must be >= 0, got %d", sessionID, o.Offset)
	}
	limit := pageLimit(o.Limit, store.DefaultMessagePageSize)
	rows, err := s.q.Query(ctx, `SELECT s.message_count, m.message
		FROM helix.sessions s
		LEFT JOIN LATERAL (
			SELECT x.message FROM `+sessionMessagesSQL("s", "seq >= $2 AND seq < s.message_count", "ORDER BY seq LIMIT $3")+` x
		) m ON true
		WHERE s.session_id = $1`, sessionID, o.Offset, limit)
	if err != nil {
		return nil, wrap(err, "get messages of %s", sessionID)
	}
	defer rows.Close()
	page := &store.MessagePage{Offset: o.Offset, Limit: limit, Messages: []helix.Message{}}
	found := false
	for rows.Next() {
		found = true
		var raw []byte
		if err := rows.Scan(&page.Total, &raw); err != nil {
			return nil, wrap(err, "get messages of %s", sessionID)
		}
		if raw == nil {
			continue
		}
		var m helix.Message
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("store: get messages of %s: decode: %w", sessionID, err)
		}
		if o.ExcludeThinking {
			m.Thinking = nil
		}
		page.Messages = append(page.Messages, m)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(err, "get messages of %s", sessionID)
	}
	if !found {
		return nil, wrap(notFound("session", sessionID), "get messages")
	}
	page.HasMore = o.Offset+len(page.Messages) < page.Total
	return page, nil
}

// GetMessageCount implements store.Messages.
func (s *Store) GetMessageCount(ctx context.Context, sessionID string) (int, error) {
	var n int
	err := s.q.QueryRow(ctx, `SELECT message_count FROM helix.sessions WHERE session_id = $1`, sessionID).Scan(&n)
	if isNoRows(err) {
		err = notFound("session", sessionID)
	}
	return n, wrap(err, "get message count of %s", sessionID)
}

// TruncateMessages implements store.Messages.
func (s *Store) TruncateMessages(ctx context.Context, sessionID string, count int) error {
	if count < 0 {
		return fmt.Errorf("store: truncate messages of %s: count must be >= 0, got %d", sessionID, count)
	}
	err := s.tx(ctx, func(q Querier) error {
		n, err := q.Exec(ctx, `UPDATE helix.sessions SET message_count = LEAST(message_count, $2),
			version = version + 1, updated_at = now() WHERE session_id = $1`, sessionID, count)
		if err != nil {
			return err
		}
		if n == 0 {
			return notFound("session", sessionID)
		}
		if err := literalMarkers(ctx, q, sessionID, count); err != nil {
			return err
		}
		// The rows removed, pending model records included, move the model
		// records they hold to helix.step_journal: their workflows may
		// replay.
		if _, err := q.Exec(ctx, `SELECT helix.evict_pending_messages($1, $2)`, sessionID, count); err != nil {
			return err
		}
		// Checkpoints that reference removed messages are no longer valid
		// restore points. The usage they hold stays (the tokens were
		// spent): it moves to helix.usage. So do the step journal's
		// records they carry, to helix.step_journal: the
		// workflow that wrote them may not have ended (a crash after its
		// last commit), and its recovery replays them rather than run its
		// tools and commits again.
		if _, err := q.Exec(ctx, `WITH gone AS (
				DELETE FROM helix.checkpoints c
				WHERE c.session_key = (SELECT key FROM helix.sessions WHERE session_id = $1) AND c.message_count > $2
				RETURNING helix.checkpoint_id_of($1, c.step_count, c.id_ms, c.id_rand) AS checkpoint_id, $1::text AS session_id,
					c.run_id, c.step_count, c.usage, c.journal, c.message_count, c.created_at, c.created_seq
			), journal AS (
				INSERT INTO helix.step_journal (workflow_id, id, name, output, error, started_at, completed_at)
				SELECT helix.journal_workflow(r.workflow_id, x.seg), x.id, x.name, x.output, x.error, x.started_at, x.completed_at
				FROM gone g JOIN helix.runs r ON r.run_id = g.run_id, helix.checkpoint_journal(g.checkpoint_id, g.journal, g.message_count) x
				WHERE g.journal IS NOT NULL
			)
			INSERT INTO helix.usage (session_id, run_id, step, source_type, source_name, input_tokens, output_tokens,
				cached_tokens, cache_write_tokens, value, duration_ms, success, key, created_at)
			SELECT u.session_id, u.run_id, u.step, u.source_type, u.source_name, u.input_tokens, u.output_tokens,
				u.cached_tokens, u.cache_write_tokens, u.value, u.duration_ms, u.success, u.key, u.created_at
			FROM gone g, LATERAL helix.checkpoint_usage(g.session_id, g.run_id, g.step_count, g.usage, g.created_at) AS u
			WHERE g.usage IS NOT NULL
			ORDER BY g.created_seq, u.ord
			ON CONFLICT (session_id, key) DO NOTHING`, sessionID, count); err != nil {
			return err
		}
		_, err = q.Exec(ctx, `UPDATE helix.sessions s SET checkpoint_id = (`+newestCheckpointIDSQL+`)
			WHERE s.session_id = $1 AND s.checkpoint_id IS NOT NULL
			  AND NOT EXISTS (`+sessionCheckpointSQL+`)`, sessionID)
		return err
	})
	return wrap(err, "truncate messages of %s", sessionID)
}
