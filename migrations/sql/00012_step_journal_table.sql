-- +goose Up
-- The step journal's records move to a table of their own: one index (its
-- primary key) instead of dbos.operation_outputs' three, and narrower rows
-- (issue 15: a third of the WAL the journal wrote went to DBOS's indexes).
-- IDs keep their numbering from 1,000,000 (workflows.JournalBase), which
-- DBOS's message consumption records (consumed_by_function_id).
CREATE TABLE helix.step_journal (
    workflow_id  text    NOT NULL,
    id           integer NOT NULL,
    name         text    NOT NULL,
    output       text,
    error        text,
    started_at   bigint,
    completed_at bigint,
    PRIMARY KEY (workflow_id, id)
);

-- Records written before this migration are copied over (DBOS's schema may
-- not exist yet: `helix-dbos migrate up` on a new database).
-- +goose StatementBegin
DO $do$
BEGIN
    IF to_regclass('dbos.operation_outputs') IS NOT NULL THEN
        INSERT INTO helix.step_journal (workflow_id, id, name, output, error, started_at, completed_at)
        SELECT workflow_uuid, function_id, function_name, output, error, started_at_epoch_ms, completed_at_epoch_ms
        FROM dbos.operation_outputs WHERE function_id >= 1000000
        ON CONFLICT DO NOTHING;
    END IF;
END
$do$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.record_steps(wf text, owner text, ids integer[], names text[], outputs text[],
                                              errs text[], started bigint[], completed bigint[])
RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
    current_owner text;
    written integer;
BEGIN
    SELECT owner_xid INTO current_owner FROM dbos.workflow_status WHERE workflow_uuid = wf FOR NO KEY UPDATE;
    IF current_owner IS NULL OR current_owner <> owner THEN
        RAISE EXCEPTION 'workflow % is no longer owned by this execution', wf USING ERRCODE = 'HX409';
    END IF;
    INSERT INTO helix.step_journal (workflow_id, id, name, output, error, started_at, completed_at)
    SELECT wf, u.id, u.name, u.output, u.err, u.s, u.c
    FROM unnest(ids, names, outputs, errs, started, completed) AS u(id, name, output, err, s, c)
    ON CONFLICT (workflow_id, id) DO NOTHING;
    GET DIAGNOSTICS written = ROW_COUNT;
    IF written < cardinality(ids) AND EXISTS (
        SELECT 1
        FROM unnest(ids, names, outputs, errs, started) AS u(id, name, output, err, s)
        JOIN helix.step_journal o ON o.workflow_id = wf AND o.id = u.id
        WHERE o.name <> u.name OR o.output IS DISTINCT FROM u.output
           OR o.error IS DISTINCT FROM u.err OR o.started_at IS DISTINCT FROM u.s) THEN
        RAISE EXCEPTION 'a step of workflow % was recorded by another execution', wf USING ERRCODE = 'HX409';
    END IF;
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
    written integer;
BEGIN
    SELECT owner_xid INTO current_owner FROM dbos.workflow_status WHERE workflow_uuid = wf FOR NO KEY UPDATE;
    IF current_owner IS NULL OR current_owner <> owner THEN
        RAISE EXCEPTION 'workflow % is no longer owned by this execution', wf USING ERRCODE = 'HX409';
    END IF;
    INSERT INTO dbos.operation_outputs (workflow_uuid, function_id, function_name, output, error,
                                        started_at_epoch_ms, completed_at_epoch_ms, serialization)
    SELECT wf, u.id, u.name, u.output, u.err, u.s, u.c, 'portable_json'
    FROM unnest(ids, names, outputs, errs, started, completed) AS u(id, name, output, err, s, c)
    ON CONFLICT (workflow_uuid, function_id) DO NOTHING;
    GET DIAGNOSTICS written = ROW_COUNT;
    IF written < cardinality(ids) AND EXISTS (
        SELECT 1
        FROM unnest(ids, names, outputs, errs, started) AS u(id, name, output, err, s)
        JOIN dbos.operation_outputs o ON o.workflow_uuid = wf AND o.function_id = u.id
        WHERE o.function_name <> u.name OR o.output IS DISTINCT FROM u.output
           OR o.error IS DISTINCT FROM u.err OR o.started_at_epoch_ms IS DISTINCT FROM u.s) THEN
        RAISE EXCEPTION 'a step of workflow % was recorded by another execution', wf USING ERRCODE = 'HX409';
    END IF;
END
$fn$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $do$
BEGIN
    IF to_regclass('dbos.operation_outputs') IS NOT NULL THEN
        INSERT INTO dbos.operation_outputs (workflow_uuid, function_id, function_name, output, error,
                                            started_at_epoch_ms, completed_at_epoch_ms, serialization)
        SELECT workflow_id, id, name, output, error, started_at, completed_at, 'portable_json' FROM helix.step_journal
        ON CONFLICT DO NOTHING;
    END IF;
END
$do$;
-- +goose StatementEnd
DROP TABLE helix.step_journal;
