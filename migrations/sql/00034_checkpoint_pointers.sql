-- +goose NO TRANSACTION
-- +goose Up
-- One index less per agent step (issue 15, storage per step): the keyed
-- checkpoints' second index, checkpoints_k_session_idx (session_key,
-- created_seq), goes. Every step's checkpoint added an entry to it (28
-- bytes, and its pages), and it served three readers only:
--   - the newest checkpoint of a session whose row points at it with ''
--     (a step commit's pointer since 00026). A step's commit writes its
--     checkpoint's ID into the session row again (store/postgres,
--     commitStepSQL: the ID is a few dozen bytes of the row's update,
--     about what the index entry cost in WAL), which a primary-key probe
--     resolves; a pointer '' left by an earlier release still reads as
--     the newest, by a scan of the session's checkpoints, until the
--     session's next step;
--   - helix.run_journals and helix.run_model_messages, which walked a
--     session's checkpoints backwards in created_seq order to the newest
--     of an earlier turn. They now read the session's checkpoints once,
--     without an order: that newest of an earlier turn by max(created_seq)
--     over the checkpoints of the session's earlier runs (runs' unique
--     (session_id, turn) index names them), then the run's own
--     checkpoints after it. What they return is unchanged; a replay reads
--     every checkpoint of its session's keyed rows once (the primary
--     key's session_key prefix), instead of the run's own;
--   - the listings by created_seq (ListCheckpoints, GetLatestCheckpoint),
--     which sort the session's checkpoints.
-- Releases before this one keep working: they read explicit pointers,
-- and their pointer '' by the same scan.
--
-- The index is dropped concurrently (no lock that holds off the steps'
-- inserts); see 00030 for the advisory lock that keeps other migrating
-- processes out of its way. A drop that fails part way leaves the index
-- invalid, and the migration drops it at its next run.

-- helix.earlier_turn_checkpoint returns the created_seq and message count
-- of the newest checkpoint of session sess (key sess_key; NULL: none)
-- written by a run of a turn before own_turn, or no row. The earlier runs
-- are read first, so the session's checkpoints are read once whatever the
-- planner thinks of a session's runs (a join planned for one run read them
-- once per run).
-- +goose StatementBegin
CREATE FUNCTION helix.earlier_turn_checkpoint(sess text, sess_key bigint, own_turn integer)
RETURNS TABLE (created_seq bigint, message_count integer) LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    earlier text[] := ARRAY(SELECT r.run_id FROM helix.runs r WHERE r.session_id = sess AND r.turn < own_turn);
BEGIN
    IF cardinality(earlier) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT x.created_seq, x.message_count FROM (
            SELECT cp.created_seq, cp.message_count, cp.run_id FROM helix.checkpoints cp WHERE cp.session_id = sess
            UNION ALL
            SELECT cp.created_seq, cp.message_count, cp.run_id FROM helix.checkpoints_k cp WHERE cp.session_key = sess_key) x
        JOIN unnest(earlier) AS e(run_id) ON e.run_id = x.run_id
        ORDER BY x.created_seq DESC LIMIT 1;
END
$fn$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.run_journals(sess text, run text, seg integer)
RETURNS TABLE (checkpoint_id text, journal text, message_count integer) LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    own_turn integer;
    sess_key bigint;
    bound bigint;
BEGIN
    SELECT r.turn INTO own_turn FROM helix.runs r WHERE r.run_id = run;
    IF own_turn IS NULL THEN
        RETURN;
    END IF;
    SELECT s.key INTO sess_key FROM helix.sessions s WHERE s.session_id = sess;
    SELECT e.created_seq INTO bound FROM helix.earlier_turn_checkpoint(sess, sess_key, own_turn) e;
    RETURN QUERY SELECT x.checkpoint_id, x.journal, x.message_count FROM (
            SELECT cp.checkpoint_id, cp.journal, cp.message_count, cp.created_seq FROM helix.checkpoints cp
            WHERE cp.session_id = sess AND cp.run_id = run
            UNION ALL
            SELECT helix.checkpoint_id_of(sess, cp.step_count, cp.id_ms, cp.id_rand), cp.journal, cp.message_count,
                cp.created_seq
            FROM helix.checkpoints_k cp WHERE cp.session_key = sess_key AND cp.run_id = run) x
        WHERE x.created_seq > COALESCE(bound, 0) AND split_part(substr(x.journal, 2), ',', 1) = seg::text
        ORDER BY x.created_seq DESC;
END
$fn$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.run_model_messages(sess text, run text, seg integer)
RETURNS TABLE (seq integer, message text, meta text) LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    own_turn integer;
    bound integer;
    sess_key bigint;
BEGIN
    SELECT r.turn INTO own_turn FROM helix.runs r WHERE r.run_id = run;
    IF own_turn IS NULL THEN
        RETURN;
    END IF;
    SELECT s.key INTO sess_key FROM helix.sessions s WHERE s.session_id = sess;
    SELECT e.message_count INTO bound FROM helix.earlier_turn_checkpoint(sess, sess_key, own_turn) e;
    RETURN QUERY SELECT x.seq, x.message::text, x.meta::text FROM (
            SELECT m.seq, m.message, m.meta FROM helix.messages m
            WHERE sess_key IS NULL AND m.session_id = sess AND m.seq >= COALESCE(bound, 0) AND m.meta IS NOT NULL
            UNION ALL
            SELECT m.seq, m.message, m.meta FROM helix.messages_k m
            WHERE m.session_key = sess_key AND m.seq >= COALESCE(bound, 0) AND m.meta IS NOT NULL) x
        WHERE (x.meta->>0)::integer = own_turn AND (x.meta->>1)::integer = seg
        ORDER BY x.seq;
END
$fn$;
-- +goose StatementEnd

DROP INDEX CONCURRENTLY IF EXISTS helix.checkpoints_k_session_idx;

-- +goose Down
-- Works: the index and the walks of 00029 and 00033 again. Sessions whose
-- row holds their checkpoint's ID keep it (00026's readers read it). If
-- the build fails part way, Postgres leaves an invalid index of that name,
-- which IF NOT EXISTS would then keep: drop it (DROP INDEX CONCURRENTLY
-- helix.checkpoints_k_session_idx) and run the Down again.
CREATE INDEX CONCURRENTLY IF NOT EXISTS checkpoints_k_session_idx ON helix.checkpoints_k (session_key, created_seq);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.run_journals(sess text, run text, seg integer)
RETURNS TABLE (checkpoint_id text, journal text, message_count integer) LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    own_turn integer;
    sess_key bigint;
    c record;
BEGIN
    SELECT r.turn INTO own_turn FROM helix.runs r WHERE r.run_id = run;
    IF own_turn IS NULL THEN
        RETURN;
    END IF;
    SELECT s.key INTO sess_key FROM helix.sessions s WHERE s.session_id = sess;
    FOR c IN SELECT x.checkpoint_id, x.run_id, x.journal, x.message_count FROM (
                 SELECT cp.checkpoint_id, cp.run_id, cp.journal, cp.message_count, cp.created_seq FROM helix.checkpoints cp
                 WHERE cp.session_id = sess
                 UNION ALL
                 SELECT helix.checkpoint_id_of(sess, cp.step_count, cp.id_ms, cp.id_rand), cp.run_id, cp.journal,
                     cp.message_count, cp.created_seq
                 FROM helix.checkpoints_k cp WHERE cp.session_key = sess_key) x
             ORDER BY x.created_seq DESC LOOP
        IF c.run_id = run THEN
            IF split_part(substr(c.journal, 2), ',', 1) = seg::text THEN
                checkpoint_id := c.checkpoint_id;
                journal := c.journal;
                message_count := c.message_count;
                RETURN NEXT;
            END IF;
        ELSIF (SELECT r.turn < own_turn FROM helix.runs r WHERE r.run_id = c.run_id) THEN
            EXIT;
        END IF;
    END LOOP;
END
$fn$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.run_model_messages(sess text, run text, seg integer)
RETURNS TABLE (seq integer, message text, meta text) LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    own_turn integer;
    bound integer := 0;
    sess_key bigint;
    c record;
BEGIN
    SELECT r.turn INTO own_turn FROM helix.runs r WHERE r.run_id = run;
    IF own_turn IS NULL THEN
        RETURN;
    END IF;
    SELECT s.key INTO sess_key FROM helix.sessions s WHERE s.session_id = sess;
    FOR c IN SELECT x.run_id, x.message_count FROM (
                 SELECT cp.run_id, cp.message_count, cp.created_seq FROM helix.checkpoints cp WHERE cp.session_id = sess
                 UNION ALL
                 SELECT cp.run_id, cp.message_count, cp.created_seq FROM helix.checkpoints_k cp WHERE cp.session_key = sess_key) x
             ORDER BY x.created_seq DESC LOOP
        IF c.run_id IS DISTINCT FROM run AND (SELECT r.turn < own_turn FROM helix.runs r WHERE r.run_id = c.run_id) THEN
            bound := c.message_count;
            EXIT;
        END IF;
    END LOOP;
    RETURN QUERY SELECT x.seq, x.message::text, x.meta::text FROM (
            SELECT m.seq, m.message, m.meta FROM helix.messages m
            WHERE sess_key IS NULL AND m.session_id = sess AND m.seq >= bound AND m.meta IS NOT NULL
            UNION ALL
            SELECT m.seq, m.message, m.meta FROM helix.messages_k m
            WHERE m.session_key = sess_key AND m.seq >= bound AND m.meta IS NOT NULL) x
        WHERE (x.meta->>0)::integer = own_turn AND (x.meta->>1)::integer = seg
        ORDER BY x.seq;
END
$fn$;
-- +goose StatementEnd

DROP FUNCTION helix.earlier_turn_checkpoint(text, bigint, integer);
