-- +goose Up
-- A step's updates of its session and stream rows log fewer bytes (issue
-- 15, WAL per step; store/postgres: commitStepSQL, insertChunksSQL). Both
-- updates are heap-only, and the WAL record of such an update logs the new
-- row from the first column it changes to the last: every byte between is
-- logged again at every step. Nothing here rewrites a table (moving the
-- columns a step changes next to each other would); what a reader of the
-- store sees is unchanged.
--
-- updated_at, the last column but one of both rows: a step's commit leaves
-- the session's alone (it writes checkpointed_at), and an append of chunks
-- the stream's (its chunks have their created_at). A row's last change is
-- greatest(updated_at, checkpointed_at) for a session and greatest(
-- updated_at, created_at of its newest stream_chunks row) for a stream;
-- every other update still writes updated_at = now(). That spared the
-- session row's checkpoint_source, metadata, tags, user_id,
-- tracing_context, expires_at and created_at (about 40 bytes per step) and
-- 20 bytes of each of the stream's two updates per step.
COMMENT ON COLUMN helix.sessions.updated_at IS
    'last change but a step commit; the session''s last change (API updatedAt, retention''s last activity) is greatest(updated_at, checkpointed_at), a step commit writing checkpointed_at (migration 00026)';
COMMENT ON COLUMN helix.streams.updated_at IS
    'last change but an append; the stream''s last change (API updatedAt) is greatest(updated_at, created_at of its newest stream_chunks row), an append writing only its chunks and latest_seq (migration 00026)';

-- checkpoint_id: a step's commit writes '' (no ID is empty: IDs given
-- empty are generated) for "the session's newest checkpoint", which is the
-- one it inserts, instead of the ID's 67 bytes. It stays so until the next
-- write of the pointer: every other insert of a checkpoint (CreateCheckpoint,
-- SaveState with a checkpoint) writes its ID, under the session's row lock,
-- and a truncation of messages that deletes the newest checkpoints leaves
-- the newest that remains, as it moved a pointer to a deleted one before.
-- helix.session_checkpoint_id reads a session's pointer as its ID.
-- +goose StatementBegin
CREATE FUNCTION helix.session_checkpoint_id(sid text, pointer text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $fn$
    SELECT CASE WHEN pointer = '' THEN (SELECT c.checkpoint_id FROM helix.checkpoints c
                                        WHERE c.session_id = sid ORDER BY c.created_seq DESC LIMIT 1)
                ELSE pointer END
$fn$;
-- +goose StatementEnd
COMMENT ON COLUMN helix.sessions.checkpoint_id IS
    'the session''s checkpoint; '''' (a step commit''s) is its newest by created_seq: read it with helix.session_checkpoint_id(session_id, checkpoint_id) (migration 00026)';

-- +goose Down
-- The previous version's code reads both updated_at alone and the pointer
-- as an ID: write each row's last change and each pointer's ID.
UPDATE helix.sessions SET checkpoint_id = helix.session_checkpoint_id(session_id, checkpoint_id) WHERE checkpoint_id = '';
UPDATE helix.sessions SET updated_at = checkpointed_at WHERE checkpointed_at > updated_at;
UPDATE helix.streams s SET updated_at = c.created_at
FROM (SELECT DISTINCT ON (stream_id) stream_id, created_at FROM helix.stream_chunks ORDER BY stream_id, seq DESC) c
WHERE c.stream_id = s.stream_id AND c.created_at > s.updated_at;
COMMENT ON COLUMN helix.sessions.checkpoint_id IS NULL;
DROP FUNCTION helix.session_checkpoint_id(text, text);
COMMENT ON COLUMN helix.streams.updated_at IS NULL;
COMMENT ON COLUMN helix.sessions.updated_at IS NULL;
