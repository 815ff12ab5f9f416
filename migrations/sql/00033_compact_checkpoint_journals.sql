-- +goose Up
-- Compact checkpoint journals (issue 15, storage per step;
-- postgres.FormatLevelCompactJournals, level 5). A step's checkpoint
-- carries its records (00025) as [seg, first, base, record ...]; from
-- level 5 the engine writes two things shorter:
--   - a record's name, when it is one of the engine's step names of
--     helix.journal_step_name's table, as its index there (a JSON integer;
--     any other name stays a string);
--   - the commit's record (helix.commit_step, the last), when it has no
--     error and its output is the checkpoint's message count alone
--     ({"<o":N}, N the checkpoint's message_count), as the short entry
--     [started, completed]: readers rebuild [name, started, completed,
--     null, {"<o":message_count}] and put the checkpoint ID back as
--     before.
-- About 50 bytes less per agent step. Journals written below level 5
-- read as before. The readers get the checkpoint's message count:
-- helix.checkpoint_journal takes it as a third argument (its two-argument
-- form, which releases before this one call, reads a short entry's output
-- as null: they never meet one, the cluster writes level 5 only once
-- every live engine reads it) and helix.run_journals returns it.

-- helix.journal_step_name returns the step name an entry stores as n:
-- a coded name (a JSON integer) named from the table, a string as it is.
-- The table is workflows' journalStepNames, part of the stored format:
-- append only, never reorder (its test compares the two).
-- +goose StatementBegin
CREATE FUNCTION helix.journal_step_name(n json) RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
    SELECT CASE json_typeof(n)
        WHEN 'number' THEN (ARRAY['helix.run_tool', 'helix.commit_step', 'helix.call_model', 'helix.fire_hooks',
            'helix.begin_run', 'helix.end_run', 'helix.approval_gate', 'helix.suspend_step',
            'helix.resolve_tool_call', 'helix.save_suspended_step', 'helix.dispatch_subagent',
            'helix.interrupt_for_children', 'helix.resume_child', 'helix.save_child_wait',
            'helix.companion', 'helix.companion_cancel', 'helix.companion_wait_ended',
            'helix.deliver_completions', 'helix.segment_status'])[(n::text)::integer + 1]
        ELSE n #>> '{}' END
$fn$;
-- +goose StatementEnd

-- helix.checkpoint_journal (00025) with the checkpoint's message count
-- mc: the records of checkpoint cp's journal j, one row each, names
-- expanded, outputs coded as stored (the commit's with its checkpoint ID,
-- coded "<t", back in), a short commit entry rebuilt.
-- +goose StatementBegin
CREATE FUNCTION helix.checkpoint_journal(cp text, j text, mc integer)
RETURNS TABLE (seg integer, id integer, name text, output text, error text, started_at bigint, completed_at bigint)
LANGUAGE sql IMMUTABLE AS $fn$
    SELECT (j::json->>0)::integer, (j::json->>1)::integer + e.i::integer - 4, x.name,
           CASE WHEN x.name = 'helix.commit_step' AND json_array_length(x.r) = 5
                     AND json_typeof(x.r->4) = 'object'
                THEN '{"<t":' || to_json(cp)::text
                     || CASE WHEN (x.r->4)::text = '{}' THEN '}' ELSE ',' || substr((x.r->4)::text, 2) END
                WHEN json_array_length(x.r) = 5 THEN (x.r->4)::text END,
           x.r->>3, (j::json->>2)::bigint + (x.r->>1)::bigint, (j::json->>2)::bigint + (x.r->>2)::bigint
    FROM json_array_elements(j::json) WITH ORDINALITY AS e(r, i),
        LATERAL (SELECT CASE WHEN json_typeof(e.r) <> 'array' THEN e.r WHEN json_array_length(e.r) = 2
                    THEN ('["helix.commit_step",' || (e.r->0)::text || ',' || (e.r->1)::text || ',null,'
                          || COALESCE('{"<o":' || mc || '}', 'null') || ']')::json
                    ELSE e.r END AS r) s,
        LATERAL (SELECT helix.journal_step_name(s.r->0) AS name, s.r) x
    WHERE e.i > 3
$fn$;
-- +goose StatementEnd

-- The two-argument form, for releases before this one: no message count.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.checkpoint_journal(cp text, j text)
RETURNS TABLE (seg integer, id integer, name text, output text, error text, started_at bigint, completed_at bigint)
LANGUAGE sql IMMUTABLE STRICT AS $fn$
    SELECT * FROM helix.checkpoint_journal(cp, j, NULL)
$fn$;
-- +goose StatementEnd

-- 00029's replay reader with the checkpoints' message counts (a new
-- column: a release before this one reads the others by name).
DROP FUNCTION helix.run_journals(text, text, integer);
-- +goose StatementBegin
CREATE FUNCTION helix.run_journals(sess text, run text, seg integer)
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

CREATE OR REPLACE VIEW helix.step_journal_records AS
SELECT * FROM helix.step_journal_row_records
UNION ALL
SELECT helix.journal_workflow(r.workflow_id, x.seg), x.id, x.name, helix.journal_output(x.output), x.error,
       x.started_at, x.completed_at
FROM helix.all_checkpoints c JOIN helix.runs r ON r.run_id = c.run_id,
    helix.checkpoint_journal(c.checkpoint_id, c.journal, c.message_count) x
WHERE c.journal IS NOT NULL
UNION ALL
SELECT x.* FROM helix.all_messages m, helix.message_journal(m.session_id, m.seq, m.message, m.meta) x
WHERE m.meta IS NOT NULL;

-- +goose Down
-- Works: the functions and the view of 00025 and 00029 again. Journals
-- written at level 5 (coded names, short commit entries) are then read by
-- nothing: go down only while no engine has written at level 5 (the
-- cluster reaches it once every live engine runs this release), or after
-- those sessions are gone.
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.checkpoint_journal(cp text, j text)
RETURNS TABLE (seg integer, id integer, name text, output text, error text, started_at bigint, completed_at bigint)
LANGUAGE sql IMMUTABLE STRICT AS $fn$
    SELECT (j::json->>0)::integer, (j::json->>1)::integer + e.i::integer - 4, e.r->>0,
           CASE WHEN e.r->>0 = 'helix.commit_step' AND json_array_length(e.r) = 5
                     AND json_typeof(e.r->4) = 'object'
                THEN '{"<t":' || to_json(cp)::text
                     || CASE WHEN (e.r->4)::text = '{}' THEN '}' ELSE ',' || substr((e.r->4)::text, 2) END
                WHEN json_array_length(e.r) = 5 THEN (e.r->4)::text END,
           e.r->>3, (j::json->>2)::bigint + (e.r->>1)::bigint, (j::json->>2)::bigint + (e.r->>2)::bigint
    FROM json_array_elements(j::json) WITH ORDINALITY AS e(r, i) WHERE e.i > 3
$fn$;
-- +goose StatementEnd
DROP FUNCTION helix.checkpoint_journal(text, text, integer);

DROP FUNCTION helix.run_journals(text, text, integer);
-- +goose StatementBegin
CREATE FUNCTION helix.run_journals(sess text, run text, seg integer)
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

DROP FUNCTION helix.journal_step_name(json);
