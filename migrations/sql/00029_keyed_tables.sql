-- +goose Up
-- Integer session and stream keys in the tables every agent step appends
-- to, and compact checkpoint IDs (issue 15, storage per step; stages D and
-- E of docs/storage-plan.md, store/postgres FormatLevelKeyedTables). The
-- 36-byte text IDs were in every heap row and every index entry of
-- helix.messages, helix.checkpoints and helix.stream_chunks, and the
-- 67-byte checkpoint IDs filled the checkpoints' primary key.
--
-- A session lives in one layout for its life. One created while the
-- cluster's format level is 4 or more gets a key (helix.sessions.key, from
-- helix.session_keys), and so does the stream it creates
-- (helix.streams.key); its messages and checkpoints go to messages_k and
-- checkpoints_k, its stream's chunks to stream_chunks_k, whatever the level
-- at the time of the write. Sessions and streams without a key (older
-- ones) keep writing the tables of 00001 for good: nothing is moved, so no
-- table is rewritten and no row lock is held by a move. Readers read both.
--
-- checkpoints_k has no checkpoint_id: the ID of a row is rendered from its
-- columns, 'cpv1-' || session_id || '-s' || step_count || '-t' || id_ms ||
-- '-' || id_rand (helix.checkpoint_id_of; the cpv1 format of
-- helix.FormatCheckpointID, unchanged for users), and an ID is looked up by
-- parsing it (helix.checkpoint_id_parts). A checkpoint of a keyed session
-- whose ID is not its own cpv1 ID (an ID given by the caller) goes to
-- helix.checkpoints with its text ID. Both tables take created_seq from
-- the same sequence, so a session's checkpoints are ordered across them.
--
-- Columns are ordered for the fewest padding bytes (8-byte columns first).
CREATE SEQUENCE helix.session_keys;
ALTER TABLE helix.sessions ADD COLUMN key bigint;
ALTER TABLE helix.streams ADD COLUMN key bigint;
-- Their unique indexes are built by 00030, concurrently (a plain CREATE
-- INDEX would hold off every write to sessions for a scan of the table).
COMMENT ON COLUMN helix.sessions.key IS
    'the session''s key in messages_k and checkpoints_k; NULL: its rows are in messages and checkpoints (migration 00029)';
COMMENT ON COLUMN helix.streams.key IS
    'the stream''s key in stream_chunks_k; NULL: its rows are in stream_chunks (migration 00029)';

CREATE TABLE helix.messages_k (
    session_key bigint      NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    seq         integer     NOT NULL,
    message     jsonb       NOT NULL,
    meta        json, -- a model call's record (00028)
    PRIMARY KEY (session_key, seq)
);

CREATE TABLE helix.checkpoints_k (
    session_key     bigint      NOT NULL,
    id_ms           bigint      NOT NULL,
    created_seq     bigint      NOT NULL DEFAULT nextval('helix.checkpoints_created_seq_seq'),
    stream_sequence bigint,
    created_at      timestamptz NOT NULL DEFAULT now(),
    step_count      integer     NOT NULL,
    message_count   integer     NOT NULL,
    id_rand         text        NOT NULL,
    run_id          text,
    status          text        NOT NULL,
    custom_state    jsonb       NOT NULL,
    output          jsonb,
    usage           json,
    journal         text,
    PRIMARY KEY (session_key, step_count, id_ms, id_rand)
);
CREATE INDEX checkpoints_k_session_idx ON helix.checkpoints_k (session_key, created_seq);

CREATE TABLE helix.stream_chunks_k (
    stream_key bigint      NOT NULL,
    seq        bigint      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    step       integer     NOT NULL DEFAULT 0,
    attempt    integer     NOT NULL DEFAULT 0,
    n          integer     NOT NULL DEFAULT 1 CHECK (n >= 1),
    run_id     text,
    chunk      json        NOT NULL, -- json, not jsonb: stored and served byte for byte
    PRIMARY KEY (stream_key, seq)
);

-- helix.checkpoint_id_of renders the ID of a checkpoints_k row of session
-- sid (an expression: Postgres inlines it).
CREATE FUNCTION helix.checkpoint_id_of(sid text, step integer, ms bigint, rand text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT 'cpv1-' || sid || '-s' || step || '-t' || ms || '-' || rand
$fn$;

-- helix.checkpoint_id_parts returns {step, ms, random} of checkpoint ID id
-- when it is a cpv1 ID of session sid in its canonical form (the form
-- helix.checkpoint_id_of renders), else NULL: the columns a look-up of the
-- ID in checkpoints_k matches.
CREATE FUNCTION helix.checkpoint_id_parts(id text, sid text) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT CASE WHEN left(id, length(sid) + 5) = 'cpv1-' || sid
        THEN regexp_match(substr(id, length(sid) + 6), '^-s(0|[1-9][0-9]{0,8})-t(0|[1-9][0-9]{0,17})-([0-9A-Za-z]+)$') END
$fn$;

-- The rows of a deleted session or stream go with it (00021), from both
-- layouts.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.delete_session_rows() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM helix.messages m USING gone g WHERE m.session_id = g.session_id;
    DELETE FROM helix.checkpoints c USING gone g WHERE c.session_id = g.session_id;
    DELETE FROM helix.messages_k m USING gone g WHERE m.session_key = g.key;
    DELETE FROM helix.checkpoints_k c USING gone g WHERE c.session_key = g.key;
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.delete_stream_rows() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM helix.stream_chunks c USING gone g WHERE c.stream_id = g.stream_id;
    DELETE FROM helix.stream_chunks_k c USING gone g WHERE c.stream_key = g.key;
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd

-- helix.all_checkpoints: the checkpoints of both layouts with their text
-- IDs and session IDs, for reads by session (a filter on session_id
-- reaches both tables' session index). A look-up by checkpoint_id through
-- it reads every keyed row: look an ID up with helix.checkpoint_id_parts.
CREATE VIEW helix.all_checkpoints AS
    SELECT checkpoint_id, session_id, run_id, step_count, message_count, stream_sequence, status, custom_state,
        output, created_seq, created_at, usage, journal
    FROM helix.checkpoints
    UNION ALL
    SELECT helix.checkpoint_id_of(s.session_id, k.step_count, k.id_ms, k.id_rand), s.session_id, k.run_id,
        k.step_count, k.message_count, k.stream_sequence, k.status, k.custom_state, k.output, k.created_seq,
        k.created_at, k.usage, k.journal
    FROM helix.checkpoints_k k JOIN helix.sessions s ON s.key = k.session_key;

-- helix.all_messages: the message rows of both layouts (reads by
-- session; rows at seq >= the session's message_count are pending model
-- records, 00028).
CREATE VIEW helix.all_messages AS
    SELECT session_id, seq, message, created_at, meta FROM helix.messages
    UNION ALL
    SELECT s.session_id, m.seq, m.message, m.created_at, m.meta
    FROM helix.messages_k m JOIN helix.sessions s ON s.key = m.session_key;

-- helix.all_stream_chunks: the chunk rows of both layouts (reads by stream).
CREATE VIEW helix.all_stream_chunks AS
    SELECT stream_id, seq, run_id, step, attempt, chunk, created_at, n FROM helix.stream_chunks
    UNION ALL
    SELECT s.stream_id, c.seq, c.run_id, c.step, c.attempt, c.chunk, c.created_at, c.n
    FROM helix.stream_chunks_k c JOIN helix.streams s ON s.key = c.stream_key;

-- 00026's pointer: the newest checkpoint of either layout.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.session_checkpoint_id(sid text, pointer text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $fn$
    SELECT CASE WHEN pointer = '' THEN (SELECT x.id FROM (
            (SELECT c.checkpoint_id AS id, c.created_seq FROM helix.checkpoints c
             WHERE c.session_id = sid ORDER BY c.created_seq DESC LIMIT 1)
            UNION ALL
            (SELECT helix.checkpoint_id_of(sid, c.step_count, c.id_ms, c.id_rand), c.created_seq FROM helix.checkpoints_k c
             WHERE c.session_key = (SELECT s.key FROM helix.sessions s WHERE s.session_id = sid)
             ORDER BY c.created_seq DESC LIMIT 1)) x ORDER BY x.created_seq DESC LIMIT 1)
        ELSE pointer END
$fn$;
-- +goose StatementEnd

-- 00025's replay reader: the run's checkpoints of either layout, newest
-- first.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.run_journals(sess text, run text, seg integer)
RETURNS TABLE (checkpoint_id text, journal text) LANGUAGE plpgsql STABLE AS $fn$
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
    FOR c IN SELECT x.checkpoint_id, x.run_id, x.journal FROM (
                 SELECT cp.checkpoint_id, cp.run_id, cp.journal, cp.created_seq FROM helix.checkpoints cp
                 WHERE cp.session_id = sess
                 UNION ALL
                 SELECT helix.checkpoint_id_of(sess, cp.step_count, cp.id_ms, cp.id_rand), cp.run_id, cp.journal,
                     cp.created_seq
                 FROM helix.checkpoints_k cp WHERE cp.session_key = sess_key) x
             ORDER BY x.created_seq DESC LOOP
        IF c.run_id = run THEN
            IF split_part(substr(c.journal, 2), ',', 1) = seg::text THEN
                checkpoint_id := c.checkpoint_id;
                journal := c.journal;
                RETURN NEXT;
            END IF;
        ELSIF (SELECT r.turn < own_turn FROM helix.runs r WHERE r.run_id = c.run_id) THEN
            EXIT;
        END IF;
    END LOOP;
END
$fn$;
-- +goose StatementEnd

-- 00028's model records in message rows, in either layout: a keyed
-- session's pending rows are in messages_k.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.evict_pending_messages(sess text, from_seq integer, keep jsonb DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    n integer;
    sess_key bigint;
BEGIN
    SELECT s.key INTO sess_key FROM helix.sessions s WHERE s.session_id = sess;
    WITH gone_t AS (
        DELETE FROM helix.messages m
        WHERE sess_key IS NULL AND m.session_id = sess AND m.seq >= from_seq
          AND NOT (keep IS NOT NULL AND m.seq = from_seq AND m.message = keep)
        RETURNING m.seq, m.message, m.meta
    ), gone_k AS (
        DELETE FROM helix.messages_k m
        WHERE m.session_key = sess_key AND m.seq >= from_seq
          AND NOT (keep IS NOT NULL AND m.seq = from_seq AND m.message = keep)
        RETURNING m.seq, m.message, m.meta
    ), gone AS (
        SELECT * FROM gone_t UNION ALL SELECT * FROM gone_k
    ), moved AS (
        INSERT INTO helix.step_journal (workflow_id, id, name, output, error, started_at, completed_at)
        SELECT x.* FROM gone g, helix.message_journal(sess, g.seq, g.message, g.meta) x
        ON CONFLICT (workflow_id, id) DO NOTHING
    )
    SELECT count(*) INTO n FROM gone;
    RETURN n;
END
$fn$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.record_model_message(wf text, owner text, ids integer[], names text[], outputs text[],
                                           errs text[], started bigint[], completed bigint[],
                                           sess text, at_seq integer, row_message jsonb, row_meta json)
RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
    k integer := cardinality(ids);
    calls text;
    inserted boolean := false;
    sess_key bigint;
BEGIN
    SELECT s.key INTO sess_key FROM helix.sessions s WHERE s.session_id = sess AND s.message_count = at_seq FOR NO KEY UPDATE;
    IF FOUND AND sess_key IS NULL AND NOT EXISTS (SELECT 1 FROM helix.messages m WHERE m.session_id = sess AND m.seq = at_seq) THEN
        PERFORM helix.check_journal_owner(wf, owner);
        INSERT INTO helix.messages AS m (session_id, seq, message, meta) VALUES (sess, at_seq, row_message, row_meta)
        RETURNING coalesce((m.message->'toolCalls')::text, 'null') INTO calls;
        inserted := true;
    ELSIF FOUND AND sess_key IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM helix.messages_k m WHERE m.session_key = sess_key AND m.seq = at_seq) THEN
        PERFORM helix.check_journal_owner(wf, owner);
        INSERT INTO helix.messages_k AS m (session_key, seq, message, meta) VALUES (sess_key, at_seq, row_message, row_meta)
        RETURNING coalesce((m.message->'toolCalls')::text, 'null') INTO calls;
        inserted := true;
    END IF;
    IF NOT inserted THEN
        PERFORM helix.record_steps(wf, owner, ids, names, outputs, errs, started, completed);
        RETURN NULL;
    END IF;
    IF k > 1 THEN
        PERFORM helix.record_steps(wf, owner, ids[1:k-1], names[1:k-1], outputs[1:k-1], errs[1:k-1],
                                   started[1:k-1], completed[1:k-1]);
    END IF;
    RETURN calls;
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

-- 00019's and 00025's views read both layouts.
CREATE OR REPLACE VIEW helix.usage_records AS
    SELECT session_id, run_id, step, source_type, source_name, input_tokens, output_tokens, cached_tokens,
        cache_write_tokens, value, duration_ms, success, key, created_at, id AS seq_a, 0::bigint AS seq_b
    FROM helix.usage
    UNION ALL
    SELECT u.session_id, u.run_id, u.step, u.source_type, u.source_name, u.input_tokens, u.output_tokens,
        u.cached_tokens, u.cache_write_tokens, u.value, u.duration_ms, u.success, u.key, u.created_at,
        c.created_seq, u.ord
    FROM helix.all_checkpoints c,
        LATERAL helix.checkpoint_usage(c.session_id, c.run_id, c.step_count, c.usage, c.created_at) AS u
    WHERE c.usage IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM helix.usage x WHERE x.session_id = u.session_id AND x.key = u.key);

CREATE OR REPLACE VIEW helix.step_journal_records AS
SELECT * FROM helix.step_journal_row_records
UNION ALL
SELECT helix.journal_workflow(r.workflow_id, x.seg), x.id, x.name, helix.journal_output(x.output), x.error,
       x.started_at, x.completed_at
FROM helix.all_checkpoints c JOIN helix.runs r ON r.run_id = c.run_id,
    helix.checkpoint_journal(c.checkpoint_id, c.journal) x
WHERE c.journal IS NOT NULL
UNION ALL
SELECT x.* FROM helix.all_messages m, helix.message_journal(m.session_id, m.seq, m.message, m.meta) x
WHERE m.meta IS NOT NULL;

-- +goose Down
-- Works: the keyed rows move back to the tables of 00001, with their text
-- IDs (checkpoint IDs rendered, created_seq kept), and the functions and
-- views read those alone again, so a release of level 3 finds every row
-- where it reads. It rewrites every keyed row once (run it with the
-- engines stopped); the keys are lost.
INSERT INTO helix.messages (session_id, seq, message, created_at, meta)
SELECT s.session_id, m.seq, m.message, m.created_at, m.meta FROM helix.messages_k m JOIN helix.sessions s ON s.key = m.session_key;
INSERT INTO helix.checkpoints (checkpoint_id, session_id, run_id, step_count, message_count, stream_sequence, status,
    custom_state, output, created_seq, created_at, usage, journal)
SELECT helix.checkpoint_id_of(s.session_id, k.step_count, k.id_ms, k.id_rand), s.session_id, k.run_id, k.step_count,
    k.message_count, k.stream_sequence, k.status, k.custom_state, k.output, k.created_seq, k.created_at, k.usage, k.journal
FROM helix.checkpoints_k k JOIN helix.sessions s ON s.key = k.session_key;
INSERT INTO helix.stream_chunks (stream_id, seq, run_id, step, attempt, chunk, created_at, n)
SELECT s.stream_id, c.seq, c.run_id, c.step, c.attempt, c.chunk, c.created_at, c.n
FROM helix.stream_chunks_k c JOIN helix.streams s ON s.key = c.stream_key;

CREATE OR REPLACE VIEW helix.step_journal_records AS
SELECT * FROM helix.step_journal_row_records
UNION ALL
SELECT helix.journal_workflow(r.workflow_id, x.seg), x.id, x.name, helix.journal_output(x.output), x.error,
       x.started_at, x.completed_at
FROM helix.checkpoints c JOIN helix.runs r ON r.run_id = c.run_id, helix.checkpoint_journal(c.checkpoint_id, c.journal) x
WHERE c.journal IS NOT NULL
UNION ALL
SELECT x.* FROM helix.messages m, helix.message_journal(m.session_id, m.seq, m.message, m.meta) x
WHERE m.meta IS NOT NULL;

-- 00028's functions as they were.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.evict_pending_messages(sess text, from_seq integer, keep jsonb DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    n integer;
BEGIN
    WITH gone AS (
        DELETE FROM helix.messages m
        WHERE m.session_id = sess AND m.seq >= from_seq
          AND NOT (keep IS NOT NULL AND m.seq = from_seq AND m.message = keep)
        RETURNING m.seq, m.message, m.meta
    ), moved AS (
        INSERT INTO helix.step_journal (workflow_id, id, name, output, error, started_at, completed_at)
        SELECT x.* FROM gone g, helix.message_journal(sess, g.seq, g.message, g.meta) x
        ON CONFLICT (workflow_id, id) DO NOTHING
    )
    SELECT count(*) INTO n FROM gone;
    RETURN n;
END
$fn$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.record_model_message(wf text, owner text, ids integer[], names text[], outputs text[],
                                           errs text[], started bigint[], completed bigint[],
                                           sess text, at_seq integer, row_message jsonb, row_meta json)
RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
    k integer := cardinality(ids);
    calls text;
    inserted boolean := false;
BEGIN
    PERFORM 1 FROM helix.sessions s WHERE s.session_id = sess AND s.message_count = at_seq FOR NO KEY UPDATE;
    IF FOUND AND NOT EXISTS (SELECT 1 FROM helix.messages m WHERE m.session_id = sess AND m.seq = at_seq) THEN
        PERFORM helix.check_journal_owner(wf, owner);
        INSERT INTO helix.messages AS m (session_id, seq, message, meta) VALUES (sess, at_seq, row_message, row_meta)
        RETURNING coalesce((m.message->'toolCalls')::text, 'null') INTO calls;
        inserted := true;
    END IF;
    IF NOT inserted THEN
        PERFORM helix.record_steps(wf, owner, ids, names, outputs, errs, started, completed);
        RETURN NULL;
    END IF;
    IF k > 1 THEN
        PERFORM helix.record_steps(wf, owner, ids[1:k-1], names[1:k-1], outputs[1:k-1], errs[1:k-1],
                                   started[1:k-1], completed[1:k-1]);
    END IF;
    RETURN calls;
END
$fn$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.run_model_messages(sess text, run text, seg integer)
RETURNS TABLE (seq integer, message text, meta text) LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    own_turn integer;
    bound integer := 0;
    c record;
BEGIN
    SELECT r.turn INTO own_turn FROM helix.runs r WHERE r.run_id = run;
    IF own_turn IS NULL THEN
        RETURN;
    END IF;
    FOR c IN SELECT cp.run_id, cp.message_count FROM helix.checkpoints cp
             WHERE cp.session_id = sess ORDER BY cp.created_seq DESC LOOP
        IF c.run_id IS DISTINCT FROM run AND (SELECT r.turn < own_turn FROM helix.runs r WHERE r.run_id = c.run_id) THEN
            bound := c.message_count;
            EXIT;
        END IF;
    END LOOP;
    RETURN QUERY SELECT m.seq, m.message::text, m.meta::text FROM helix.messages m
        WHERE m.session_id = sess AND m.seq >= bound AND m.meta IS NOT NULL
          AND (m.meta->>0)::integer = own_turn AND (m.meta->>1)::integer = seg
        ORDER BY m.seq;
END
$fn$;
-- +goose StatementEnd

CREATE OR REPLACE VIEW helix.usage_records AS
    SELECT session_id, run_id, step, source_type, source_name, input_tokens, output_tokens, cached_tokens,
        cache_write_tokens, value, duration_ms, success, key, created_at, id AS seq_a, 0::bigint AS seq_b
    FROM helix.usage
    UNION ALL
    SELECT u.session_id, u.run_id, u.step, u.source_type, u.source_name, u.input_tokens, u.output_tokens,
        u.cached_tokens, u.cache_write_tokens, u.value, u.duration_ms, u.success, u.key, u.created_at,
        c.created_seq, u.ord
    FROM helix.checkpoints c,
        LATERAL helix.checkpoint_usage(c.session_id, c.run_id, c.step_count, c.usage, c.created_at) AS u
    WHERE c.usage IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM helix.usage x WHERE x.session_id = u.session_id AND x.key = u.key);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.run_journals(sess text, run text, seg integer)
RETURNS TABLE (checkpoint_id text, journal text) LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    own_turn integer;
    c record;
BEGIN
    SELECT r.turn INTO own_turn FROM helix.runs r WHERE r.run_id = run;
    IF own_turn IS NULL THEN
        RETURN;
    END IF;
    FOR c IN SELECT cp.checkpoint_id, cp.run_id, cp.journal FROM helix.checkpoints cp
             WHERE cp.session_id = sess ORDER BY cp.created_seq DESC LOOP
        IF c.run_id = run THEN
            IF split_part(substr(c.journal, 2), ',', 1) = seg::text THEN
                checkpoint_id := c.checkpoint_id;
                journal := c.journal;
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
CREATE OR REPLACE FUNCTION helix.session_checkpoint_id(sid text, pointer text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $fn$
    SELECT CASE WHEN pointer = '' THEN (SELECT c.checkpoint_id FROM helix.checkpoints c
                                        WHERE c.session_id = sid ORDER BY c.created_seq DESC LIMIT 1)
                ELSE pointer END
$fn$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.delete_stream_rows() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM helix.stream_chunks c USING gone g WHERE c.stream_id = g.stream_id;
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.delete_session_rows() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM helix.messages m USING gone g WHERE m.session_id = g.session_id;
    DELETE FROM helix.checkpoints c USING gone g WHERE c.session_id = g.session_id;
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd

DROP VIEW helix.all_stream_chunks;
DROP VIEW helix.all_messages;
DROP VIEW helix.all_checkpoints;
DROP FUNCTION helix.checkpoint_id_parts(text, text);
DROP FUNCTION helix.checkpoint_id_of(text, integer, bigint, text);
DROP TABLE helix.stream_chunks_k;
DROP TABLE helix.checkpoints_k;
DROP TABLE helix.messages_k;
ALTER TABLE helix.streams DROP COLUMN key;
ALTER TABLE helix.sessions DROP COLUMN key;
DROP SEQUENCE helix.session_keys;
