-- +goose Up
-- Fewer WAL records per agent step (issue 15): no row lock that only a
-- check or a trigger needed.
--
-- The tables every agent step appends to (messages, checkpoints, stream
-- chunks) lose their foreign keys; their rows still go when their session
-- or stream does, by statement triggers (issue 15, WAL per step).
--
-- A foreign key checks each inserted row by locking its parent row
-- (SELECT ... FOR KEY SHARE): the session and the stream, which the same
-- statement has just updated, so the lock lands on the new row version
-- and writes a WAL record of its own, about 170 bytes per step, plus the
-- check's own work. Nothing needs the check: every statement that appends
-- to these tables first updates or locks the parent row in the same
-- transaction (store/postgres: commitStepSQL, insertChunksSQL,
-- AppendMessages, EndStream, insertCheckpoint and the session copy), so a
-- row is never written for a parent that is gone, and a parent deleted
-- concurrently waits on that lock and then takes the rows with it.
ALTER TABLE helix.messages DROP CONSTRAINT messages_session_id_fkey;
ALTER TABLE helix.checkpoints DROP CONSTRAINT checkpoints_session_id_fkey;
ALTER TABLE helix.stream_chunks DROP CONSTRAINT stream_chunks_stream_id_fkey;

-- +goose StatementBegin
CREATE FUNCTION helix.delete_session_rows() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM helix.messages m USING gone g WHERE m.session_id = g.session_id;
    DELETE FROM helix.checkpoints c USING gone g WHERE c.session_id = g.session_id;
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd
CREATE TRIGGER sessions_delete_rows AFTER DELETE ON helix.sessions
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION helix.delete_session_rows();

-- +goose StatementBegin
CREATE FUNCTION helix.delete_stream_rows() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM helix.stream_chunks c USING gone g WHERE c.stream_id = g.stream_id;
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd
CREATE TRIGGER streams_delete_rows AFTER DELETE ON helix.streams
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION helix.delete_stream_rows();

-- The write-once check of a session's mode runs after the update instead
-- of before it: any BEFORE UPDATE row trigger, whatever its column list,
-- makes Postgres lock the row before updating it, one more WAL record on
-- every step's update of its session. AFTER ... WHEN only queues an event
-- when the mode changes, and refuses the same updates.
DROP TRIGGER sessions_mode_write_once ON helix.sessions;
CREATE TRIGGER sessions_mode_write_once AFTER UPDATE OF mode ON helix.sessions
    FOR EACH ROW WHEN (OLD.mode IS DISTINCT FROM NEW.mode) EXECUTE FUNCTION helix.sessions_mode_write_once();

-- +goose Down
DROP TRIGGER sessions_mode_write_once ON helix.sessions;
CREATE TRIGGER sessions_mode_write_once BEFORE UPDATE OF mode ON helix.sessions
    FOR EACH ROW EXECUTE FUNCTION helix.sessions_mode_write_once();
DROP TRIGGER streams_delete_rows ON helix.streams;
DROP FUNCTION helix.delete_stream_rows();
DROP TRIGGER sessions_delete_rows ON helix.sessions;
DROP FUNCTION helix.delete_session_rows();
DELETE FROM helix.stream_chunks c WHERE NOT EXISTS (SELECT 1 FROM helix.streams s WHERE s.stream_id = c.stream_id);
DELETE FROM helix.checkpoints c WHERE NOT EXISTS (SELECT 1 FROM helix.sessions s WHERE s.session_id = c.session_id);
DELETE FROM helix.messages m WHERE NOT EXISTS (SELECT 1 FROM helix.sessions s WHERE s.session_id = m.session_id);
ALTER TABLE helix.stream_chunks ADD CONSTRAINT stream_chunks_stream_id_fkey
    FOREIGN KEY (stream_id) REFERENCES helix.streams (stream_id) ON DELETE CASCADE;
ALTER TABLE helix.checkpoints ADD CONSTRAINT checkpoints_session_id_fkey
    FOREIGN KEY (session_id) REFERENCES helix.sessions (session_id) ON DELETE CASCADE;
ALTER TABLE helix.messages ADD CONSTRAINT messages_session_id_fkey
    FOREIGN KEY (session_id) REFERENCES helix.sessions (session_id) ON DELETE CASCADE;
