-- +goose Up
-- helix.record_steps inserts without looking first. 00015's check (is any
-- of these records there already?) ran on a plan PL/pgSQL caches for the
-- connection's life: planned while the journal was small, it scanned the
-- table, and a long session's records got slower to write with every step
-- (issue 15, docs/performance.md). Nothing needs the check: only the
-- workflow's owner writes its records (the lock on its status row), and
-- the journal, before writing again after an error that may have hidden a
-- commit, reads whether the records committed (workflows/journal.go,
-- committed). A duplicate would be a bug, and fails on the primary key.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.record_steps(wf text, owner text, ids integer[], names text[], outputs text[],
                                              errs text[], started bigint[], completed bigint[])
RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
    current_owner text;
BEGIN
    SELECT owner_xid INTO current_owner FROM dbos.workflow_status WHERE workflow_uuid = wf FOR NO KEY UPDATE;
    IF current_owner IS NULL OR current_owner <> owner THEN
        RAISE EXCEPTION 'workflow % is no longer owned by this execution', wf USING ERRCODE = 'HX409';
    END IF;
    INSERT INTO helix.step_journal (workflow_id, id, name, output, error, started_at, completed_at)
    SELECT wf, u.id, u.name, u.output, u.err, u.s, u.c
    FROM unnest(ids, names, outputs, errs, started, completed) AS u(id, name, output, err, s, c);
END
$fn$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.record_steps(wf text, owner text, ids integer[], names text[], outputs text[],
                                              errs text[], started bigint[], completed bigint[])
RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
    current_owner text;
BEGIN
    -- The owner's row lock serializes every writer of wf's records, so a
    -- check then a plain INSERT is race-free.
    SELECT owner_xid INTO current_owner FROM dbos.workflow_status WHERE workflow_uuid = wf FOR NO KEY UPDATE;
    IF current_owner IS NULL OR current_owner <> owner THEN
        RAISE EXCEPTION 'workflow % is no longer owned by this execution', wf USING ERRCODE = 'HX409';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM helix.step_journal o WHERE o.workflow_id = wf AND o.id = ANY (ids)) THEN
        INSERT INTO helix.step_journal (workflow_id, id, name, output, error, started_at, completed_at)
        SELECT wf, u.id, u.name, u.output, u.err, u.s, u.c
        FROM unnest(ids, names, outputs, errs, started, completed) AS u(id, name, output, err, s, c);
        RETURN;
    END IF;
    -- A retry after a lost acknowledgement: the same records are fine.
    IF EXISTS (
        SELECT 1
        FROM unnest(ids, names, outputs, errs, started) AS u(id, name, output, err, s)
        JOIN helix.step_journal o ON o.workflow_id = wf AND o.id = u.id
        WHERE o.name <> u.name OR o.output IS DISTINCT FROM u.output
           OR o.error IS DISTINCT FROM u.err OR o.started_at IS DISTINCT FROM u.s) THEN
        RAISE EXCEPTION 'a step of workflow % was recorded by another execution', wf USING ERRCODE = 'HX409';
    END IF;
    INSERT INTO helix.step_journal (workflow_id, id, name, output, error, started_at, completed_at)
    SELECT wf, u.id, u.name, u.output, u.err, u.s, u.c
    FROM unnest(ids, names, outputs, errs, started, completed) AS u(id, name, output, err, s, c)
    WHERE NOT EXISTS (SELECT 1 FROM helix.step_journal o WHERE o.workflow_id = wf AND o.id = u.id);
END
$fn$;
-- +goose StatementEnd
