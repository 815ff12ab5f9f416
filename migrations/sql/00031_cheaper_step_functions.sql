-- +goose Up
-- Cheaper step functions (issue 15, Postgres CPU per step). 00029's
-- helix.evict_pending_messages, which every step commit calls, was planned
-- again at each call: a plpgsql statement with parameters gets a custom
-- plan while one is cheaper than its generic plan, and its one statement
-- (two deletes and the move of their records through
-- helix.message_journal, inlined) took about 0.15 ms to plan, ten times
-- what it took to run on a commit that finds nothing to evict, which is
-- nearly every commit. It now first looks, in the session's own layout,
-- for a row to evict (one index probe, cheap to plan) and runs the
-- statement only when there is one. Both statements take their own
-- snapshot after the caller's lock of the session's row, as before (see
-- 00028), so the look sees every pending row the statement would.
--
-- helix.record_model_message (every model call's record) decides the same
-- way: the free slot is looked for in the session's layout alone, and the
-- owner check is the same lock and test as helix.check_journal_owner's,
-- made here rather than through a second function call.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.evict_pending_messages(sess text, from_seq integer, keep jsonb DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    n integer;
    sess_key bigint;
BEGIN
    SELECT s.key INTO sess_key FROM helix.sessions s WHERE s.session_id = sess;
    IF sess_key IS NULL THEN
        PERFORM FROM helix.messages m WHERE m.session_id = sess AND m.seq >= from_seq
            AND NOT (keep IS NOT NULL AND m.seq = from_seq AND m.message = keep) LIMIT 1;
    ELSE
        PERFORM FROM helix.messages_k m WHERE m.session_key = sess_key AND m.seq >= from_seq
            AND NOT (keep IS NOT NULL AND m.seq = from_seq AND m.message = keep) LIMIT 1;
    END IF;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
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
    sess_key bigint;
    current_owner text;
BEGIN
    SELECT s.key INTO sess_key FROM helix.sessions s WHERE s.session_id = sess AND s.message_count = at_seq FOR NO KEY UPDATE;
    IF FOUND THEN
        IF sess_key IS NULL THEN
            PERFORM FROM helix.messages m WHERE m.session_id = sess AND m.seq = at_seq;
        ELSE
            PERFORM FROM helix.messages_k m WHERE m.session_key = sess_key AND m.seq = at_seq;
        END IF;
        IF NOT FOUND THEN
            SELECT owner_xid INTO current_owner FROM dbos.workflow_status WHERE workflow_uuid = wf FOR NO KEY UPDATE;
            IF current_owner IS NULL OR current_owner <> owner THEN
                RAISE EXCEPTION 'workflow % is no longer owned by this execution', wf USING ERRCODE = 'HX409';
            END IF;
            IF sess_key IS NULL THEN
                INSERT INTO helix.messages AS m (session_id, seq, message, meta) VALUES (sess, at_seq, row_message, row_meta)
                RETURNING coalesce((m.message->'toolCalls')::text, 'null') INTO calls;
            ELSE
                INSERT INTO helix.messages_k AS m (session_key, seq, message, meta) VALUES (sess_key, at_seq, row_message, row_meta)
                RETURNING coalesce((m.message->'toolCalls')::text, 'null') INTO calls;
            END IF;
            IF k > 1 THEN
                PERFORM helix.record_steps(wf, owner, ids[1:k-1], names[1:k-1], outputs[1:k-1], errs[1:k-1],
                                           started[1:k-1], completed[1:k-1]);
            END IF;
            RETURN calls;
        END IF;
    END IF;
    PERFORM helix.record_steps(wf, owner, ids, names, outputs, errs, started, completed);
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd

-- helix.session_checkpoint_id (every read of a session's row, through
-- store/postgres's sessionColumns) was a SQL function with a subquery,
-- which Postgres cannot inline: it planned its body again in every
-- statement that called it, about 0.15 ms, nine times per answer of a
-- human in the loop. In plpgsql its plan is kept by the connection; the
-- pointer is decided before the query, so the query's plan is the same
-- for every call and the generic plan is chosen.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.session_checkpoint_id(sid text, pointer text) RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
BEGIN
    IF pointer IS DISTINCT FROM '' THEN
        RETURN pointer;
    END IF;
    RETURN (SELECT x.id FROM (
            (SELECT c.checkpoint_id AS id, c.created_seq FROM helix.checkpoints c
             WHERE c.session_id = sid ORDER BY c.created_seq DESC LIMIT 1)
            UNION ALL
            (SELECT helix.checkpoint_id_of(sid, c.step_count, c.id_ms, c.id_rand), c.created_seq FROM helix.checkpoints_k c
             WHERE c.session_key = (SELECT s.key FROM helix.sessions s WHERE s.session_id = sid)
             ORDER BY c.created_seq DESC LIMIT 1)) x ORDER BY x.created_seq DESC LIMIT 1);
END
$fn$;
-- +goose StatementEnd

-- helix.checkpoint_id_of (00029) was meant to be inlined, but text ||
-- integer is the stable operator textanycat, and Postgres does not inline
-- an immutable function whose body is less than immutable: it planned the
-- body at each call (0.03 ms; three per answer of a human in the loop,
-- through helix.session_checkpoint_id). With the integers cast to text the
-- body is immutable and inlined; the IDs are the same text.
CREATE OR REPLACE FUNCTION helix.checkpoint_id_of(sid text, step integer, ms bigint, rand text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT 'cpv1-' || sid || '-s' || step::text || '-t' || ms::text || '-' || rand
$fn$;

-- +goose Down
-- 00029's versions.
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

CREATE OR REPLACE FUNCTION helix.checkpoint_id_of(sid text, step integer, ms bigint, rand text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT 'cpv1-' || sid || '-s' || step || '-t' || ms || '-' || rand
$fn$;
