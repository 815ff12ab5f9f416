-- +goose Up
-- The inspector's list of sessions (store/postgres PageSessions) pages by
-- keyset, newest first: (created_at, session_id) below the last row seen.
-- These indexes let each page read its rows in order and stop after them,
-- at any depth of 100k sessions and more, with or without a filter by
-- principal or agent; session IDs are searched by prefix (LIKE 'p%',
-- which needs text_pattern_ops outside the C collation). Every indexed
-- column is written once, when the session is created: a step's updates of
-- its session stay HOT (migration 00015).
CREATE INDEX sessions_roots_created_idx ON helix.sessions (created_at, session_id) WHERE parent_session_id IS NULL;
CREATE INDEX sessions_roots_user_created_idx ON helix.sessions (user_id, created_at, session_id) WHERE parent_session_id IS NULL;
CREATE INDEX sessions_roots_agent_created_idx ON helix.sessions (agent_type, created_at, session_id) WHERE parent_session_id IS NULL;
CREATE INDEX sessions_id_prefix_idx ON helix.sessions (session_id text_pattern_ops);

-- +goose Down
DROP INDEX helix.sessions_id_prefix_idx;
DROP INDEX helix.sessions_roots_agent_created_idx;
DROP INDEX helix.sessions_roots_user_created_idx;
DROP INDEX helix.sessions_roots_created_idx;
