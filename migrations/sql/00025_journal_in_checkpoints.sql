-- +goose Up
-- An agent step's commit carries its records in the checkpoint it writes
-- (issue 15, docs/performance.md "What 3 KB of WAL and messages + 1 KB of
-- storage take"): the step's pending records (its tools', its hooks') and
-- the commit's own go in checkpoints.journal, not in a helix.step_journal
-- row of their own, so the commit's transaction writes no journal row (a
-- heap tuple and a primary key entry less per step). The records of other
-- writes (the model call's, a hook's, a failed commit's) stay in
-- helix.step_journal. NULL for a checkpoint that carries none.
--
-- checkpoints.journal is a JSON array [seg, first, base, record ...]:
--   - seg: the workflow that wrote the records: 0 for the run's own
--     (helix.runs.workflow_id), k for its k-th segment (a queued run's,
--     workflow ID {workflow_id}-seg-{k}; workflows.SegmentID);
--   - first: the first record's ID, the others following it one by one;
--   - base: the time (ms since the epoch) the records' times count from;
--   - each record as in a packed row of migration 00020: [name, started,
--     completed, error, output], output (coded as in 00022) left out when
--     NULL. The commit's record (helix.commit_step, always the last) does
--     not repeat its checkpoint ID: helix.checkpoint_journal puts it back.
-- A replay reads a run's checkpoints backwards from the newest
-- (helix.run_journals); helix.step_journal_records shows these records
-- with the others, and a checkpoint deleted before its session (a retry's
-- TruncateMessages) leaves its records in helix.step_journal.
ALTER TABLE helix.checkpoints ADD COLUMN journal text;

-- helix.journal_workflow is the ID of the workflow that wrote a journal
-- whose run's workflow is run_wf.
CREATE FUNCTION helix.journal_workflow(run_wf text, seg integer) RETURNS text LANGUAGE sql IMMUTABLE AS $fn$
    SELECT CASE seg WHEN 0 THEN run_wf ELSE run_wf || '-seg-' || seg END
$fn$;

-- helix.checkpoint_journal returns the records of checkpoint cp's journal
-- j, one row each, outputs coded as stored (the commit's with its
-- checkpoint ID, coded "<t", back in).
-- +goose StatementBegin
CREATE FUNCTION helix.checkpoint_journal(cp text, j text)
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

-- helix.run_journals returns the journals the checkpoints of run of
-- session sess carry for its workflow seg (see above), for a replay: it
-- walks the session's checkpoints backwards from the newest (its
-- (session_id, created_seq) index) and stops at the first of a run that
-- began before this one, so it reads the run's own checkpoints and the
-- few written since (a later run's, should one have begun before this
-- one's recovery; checkpoints with no run, or written mid-run without a
-- commit, are passed over), not the session's history.
-- +goose StatementBegin
CREATE FUNCTION helix.run_journals(sess text, run text, seg integer)
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

-- helix.check_journal_owner is helix.record_steps's owner check and lock
-- (00018) alone: the statement that ends a commit whose records its
-- checkpoint carries.
-- +goose StatementBegin
CREATE FUNCTION helix.check_journal_owner(wf text, owner text) RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
    current_owner text;
BEGIN
    SELECT owner_xid INTO current_owner FROM dbos.workflow_status WHERE workflow_uuid = wf FOR NO KEY UPDATE;
    IF current_owner IS NULL OR current_owner <> owner THEN
        RAISE EXCEPTION 'workflow % is no longer owned by this execution', wf USING ERRCODE = 'HX409';
    END IF;
END
$fn$;
-- +goose StatementEnd

-- helix.step_journal_records adds the records checkpoints carry to those
-- of helix.step_journal's rows (00022's view, renamed).
ALTER VIEW helix.step_journal_records RENAME TO step_journal_row_records;
CREATE VIEW helix.step_journal_records AS
SELECT * FROM helix.step_journal_row_records
UNION ALL
SELECT helix.journal_workflow(r.workflow_id, x.seg), x.id, x.name, helix.journal_output(x.output), x.error,
       x.started_at, x.completed_at
FROM helix.checkpoints c JOIN helix.runs r ON r.run_id = c.run_id, helix.checkpoint_journal(c.checkpoint_id, c.journal) x
WHERE c.journal IS NOT NULL;

-- +goose Down
-- The records checkpoints carry become helix.step_journal rows, one per
-- record.
INSERT INTO helix.step_journal (workflow_id, id, name, output, error, started_at, completed_at)
SELECT helix.journal_workflow(r.workflow_id, x.seg), x.id, x.name, x.output, x.error, x.started_at, x.completed_at
FROM helix.checkpoints c JOIN helix.runs r ON r.run_id = c.run_id, helix.checkpoint_journal(c.checkpoint_id, c.journal) x
WHERE c.journal IS NOT NULL;
DROP VIEW helix.step_journal_records;
ALTER VIEW helix.step_journal_row_records RENAME TO step_journal_records;
DROP FUNCTION helix.check_journal_owner(text, text);
DROP FUNCTION helix.run_journals(text, text, integer);
DROP FUNCTION helix.checkpoint_journal(text, text);
DROP FUNCTION helix.journal_workflow(text, integer);
ALTER TABLE helix.checkpoints DROP COLUMN journal;
