-- +goose Up
-- A step's commit leaves the updated_at of its session and of its stream
-- alone (issue 15, WAL per step; store/postgres: commitStepSQL,
-- insertChunksSQL). A step's updates of both rows are heap-only, and the WAL
-- record of such an update logs the row from the first column it changes
-- to the last: updated_at is at the end of both rows, so writing it at
-- every step logged the session row's checkpoint_source, metadata, tags,
-- user_id, tracing_context, expires_at and created_at again (about 45
-- bytes), and 20 bytes of each of the stream's two updates (truncation
-- epoch, created_at). Moving the column would rewrite the tables; nothing
-- changes in the schema but these comments, which tell how to read a row's
-- last change now. The engine reads it so (store/postgres: sessionColumns,
-- streamUpdatedAtSQL, gcSelectSQL; helix-dbos doctor).
COMMENT ON COLUMN helix.sessions.updated_at IS
    'last change but a step commit; the session''s last change (API updatedAt, retention''s last activity) is greatest(updated_at, checkpointed_at), a step commit writing checkpointed_at (migration 00026)';
COMMENT ON COLUMN helix.streams.updated_at IS
    'last change but an append; the stream''s last change (API updatedAt) is greatest(updated_at, created_at of its newest stream_chunks row), an append writing only its chunks and latest_seq (migration 00026)';

-- +goose Down
-- The previous version's code reads updated_at alone: write each row's
-- last change into it (only rows a step or an append changed last).
UPDATE helix.sessions SET updated_at = checkpointed_at WHERE checkpointed_at > updated_at;
UPDATE helix.streams s SET updated_at = c.created_at
FROM (SELECT DISTINCT ON (stream_id) stream_id, created_at FROM helix.stream_chunks ORDER BY stream_id, seq DESC) c
WHERE c.stream_id = s.stream_id AND c.created_at > s.updated_at;
COMMENT ON COLUMN helix.streams.updated_at IS NULL;
COMMENT ON COLUMN helix.sessions.updated_at IS NULL;
