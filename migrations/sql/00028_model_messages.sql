-- +goose Up
-- The record of an agent step's model call is the step's assistant message
-- row (issue 15, docs/storage-plan.md stage B; written from storage format
-- level 2, FormatLevelModelMessages): a step whose tools run application
-- code records its model call at once, and that record goes into
-- helix.messages at seq = the session's message count the request was
-- built from, with what the record holds beyond the message in
-- messages.meta, instead of a helix.step_journal row of its own (a heap
-- tuple and a primary key entry less per step). The row is pending until
-- the step's commit counts it: rows at seq >= sessions.message_count are
-- pending model records, not messages, and every reader stops at the count.
-- The commit keeps the row when it holds the step's own assistant message
-- and writes the rest after it; any other writer at that seq (a new turn's
-- user message, a truncation, another run's commit) first moves the
-- pending rows' records to helix.step_journal (helix.evict_pending_messages),
-- where their workflows' replays find them.
--
-- messages.meta (json, NULL for a message that is no record) is an array
-- [turn, seg, id, started, took, durationMs, type, stopReason, inputTokens,
-- outputTokens, cachedTokens, cacheWriteTokens, model, output, error,
-- errorCode], trailing defaults left out:
--   - turn: helix.runs.turn of the run whose workflow recorded it; seg: the
--     workflow's segment (as in checkpoints.journal, 00025); id: the
--     record's ID less 1000000 (workflows.JournalBase);
--   - started: the record's start (ms since the epoch); took: its
--     completion less its start;
--   - the rest: the model output's fields (steps.ModelOutput: durationMs,
--     and its result's) but those of the message (content, thinking, tool
--     calls) and its message count (the row's seq); type NULL is
--     "tool_calls", a string or number in the middle left at its default
--     is "" or 0.
-- helix.message_record rebuilds the record's output from the row.
ALTER TABLE helix.messages ADD COLUMN meta json;

-- helix.message_record returns the output of the model call's record a
-- row holds (seq, message, meta), as JSON with no coded key (00022) and no
-- raw '<' (so that nothing reads as one): what the journal decodes into
-- steps.ModelOutput.
-- +goose StatementBegin
CREATE FUNCTION helix.message_record(seq integer, message jsonb, meta json) RETURNS text
LANGUAGE sql IMMUTABLE STRICT AS $fn$
    SELECT replace(json_build_object(
        'result', (SELECT json_object_agg(f.k, f.v ORDER BY f.o) FROM (VALUES
            (1, 'type', CASE WHEN coalesce(json_typeof(meta->6), 'null') = 'null' THEN '"tool_calls"'::json ELSE meta->6 END),
            (2, 'content', (message->'content')::json),
            (3, 'thinking', (message->'thinking')::json),
            (4, 'toolCalls', (message->'toolCalls')::json),
            (5, 'output', meta->13),
            (6, 'error', meta->14),
            (7, 'errorCode', meta->15),
            (8, 'stopReason', meta->7),
            (9, 'usage', json_build_object(
                'inputTokens', coalesce((meta->>8)::integer, 0), 'outputTokens', coalesce((meta->>9)::integer, 0),
                'cachedTokens', coalesce((meta->>10)::integer, 0), 'cacheWriteTokens', coalesce((meta->>11)::integer, 0))),
            (10, 'model', meta->12)) AS f(o, k, v)
            WHERE f.v IS NOT NULL AND json_typeof(f.v) <> 'null'),
        'durationMs', coalesce((meta->>5)::bigint, 0),
        'messageCount', seq)::text, '"<', '"\u003c')
$fn$;
-- +goose StatementEnd

-- helix.message_journal returns the helix.step_journal row of the model
-- record a row of session sess holds (at_seq, message, meta): its
-- workflow's (the run of the turn meta names; none when that run has no
-- workflow), unpacked (n = 1).
-- +goose StatementBegin
CREATE FUNCTION helix.message_journal(sess text, at_seq integer, message jsonb, meta json)
RETURNS TABLE (workflow_id text, id integer, name text, output text, error text, started_at bigint, completed_at bigint)
LANGUAGE sql STABLE STRICT AS $fn$
    SELECT helix.journal_workflow(r.workflow_id, (meta->>1)::integer), 1000000 + (meta->>2)::integer,
           'helix.call_model', helix.message_record(at_seq, message, meta), NULL::text,
           (meta->>3)::bigint, (meta->>3)::bigint + (meta->>4)::bigint
    FROM helix.runs r WHERE r.session_id = sess AND r.turn = (meta->>0)::integer AND r.workflow_id IS NOT NULL
$fn$;
-- +goose StatementEnd

-- helix.evict_pending_messages deletes session sess's rows at seq >=
-- from_seq (pending model records, and at a truncation the messages it
-- removes) but a row at from_seq whose message is keep (a step's commit
-- keeping its own assistant row), and moves the model records they hold
-- to helix.step_journal, where the workflows that wrote them replay them
-- (a record is never deleted while its workflow may replay). Its caller
-- holds the session's row lock (it updated the row first), which
-- helix.record_model_message's FOR NO KEY UPDATE waits for, and its statement
-- takes a snapshot of its own (a volatile function's), so it sees every
-- pending row written before the lock: none is written after.
-- +goose StatementBegin
CREATE FUNCTION helix.evict_pending_messages(sess text, from_seq integer, keep jsonb DEFAULT NULL) RETURNS integer
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

-- helix.record_model_message writes a model call's record (the last of
-- ids, names, ...: the journal's arrays as helix.record_steps takes them,
-- the records before it waiting for this write) as the assistant row
-- row_message at at_seq of session sess, with row_meta, when the session's message
-- count is at_seq and no row is there; the records before it go to
-- helix.step_journal as helix.record_steps writes them. Else every record,
-- the model call's too, goes to helix.step_journal. It locks the session's
-- row (FOR NO KEY UPDATE, the lock every writer of messages takes first by
-- updating the session; before the owner's) so no writer, and no other
-- model record, at at_seq runs between its look and its insert (a plain
-- one: INSERT ... ON CONFLICT would write a confirmation record more). It
-- returns the row's tool calls as stored (jsonb's text, which
-- the step's tools then run with), 'null' for none, or NULL when the record
-- went to helix.step_journal.
-- +goose StatementBegin
CREATE FUNCTION helix.record_model_message(wf text, owner text, ids integer[], names text[], outputs text[],
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

-- helix.run_model_messages returns the model records the rows of session
-- sess hold for run's workflow seg, for a replay: rows whose meta names
-- the run's turn and the segment, from the message count of the newest
-- checkpoint of an earlier turn on (a walk of the session's checkpoints
-- backwards, as helix.run_journals's; 0 when there is none), pending or
-- committed.
-- +goose StatementBegin
CREATE FUNCTION helix.run_model_messages(sess text, run text, seg integer)
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

-- helix.step_journal_records adds the records messages hold to the others
-- (00025's view).
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

-- +goose Down
-- The records messages hold become helix.step_journal rows, one per
-- record; pending rows (seq >= the session's message count) go.
INSERT INTO helix.step_journal (workflow_id, id, name, output, error, started_at, completed_at)
SELECT x.* FROM helix.messages m, helix.message_journal(m.session_id, m.seq, m.message, m.meta) x
WHERE m.meta IS NOT NULL
ON CONFLICT (workflow_id, id) DO NOTHING;
DELETE FROM helix.messages m USING helix.sessions s
WHERE m.session_id = s.session_id AND m.seq >= s.message_count;
CREATE OR REPLACE VIEW helix.step_journal_records AS
SELECT * FROM helix.step_journal_row_records
UNION ALL
SELECT helix.journal_workflow(r.workflow_id, x.seg), x.id, x.name, helix.journal_output(x.output), x.error,
       x.started_at, x.completed_at
FROM helix.checkpoints c JOIN helix.runs r ON r.run_id = c.run_id, helix.checkpoint_journal(c.checkpoint_id, c.journal) x
WHERE c.journal IS NOT NULL;
DROP FUNCTION helix.run_model_messages(text, text, integer);
DROP FUNCTION helix.record_model_message(text, text, integer[], text[], text[], text[], bigint[], bigint[], text, integer, jsonb, json);
DROP FUNCTION helix.evict_pending_messages(text, integer, jsonb);
DROP FUNCTION helix.message_journal(text, integer, jsonb, json);
DROP FUNCTION helix.message_record(integer, jsonb, json);
ALTER TABLE helix.messages DROP COLUMN meta;
