-- +goose Up
-- The step journal of the agent loop (workflows/journal.go): a workflow
-- execution records its model, tool, hook and commit steps itself, in
-- dbos.operation_outputs under function IDs from 1,000,000 (DBOS's own
-- operations keep their small IDs), so DBOS's tools list them and DBOS's
-- retention deletes them with the workflow. helix.record_steps writes a batch
-- of records in one statement, fenced like a DBOS checkpoint: it locks the
-- workflow's status row and writes only while owner (the execution's DBOS
-- owner token) still owns the workflow. A record already there with the
-- same content is an earlier attempt whose acknowledgement was lost (no-op);
-- with other content it was written by another execution: both raise HX409.
-- +goose StatementBegin
CREATE FUNCTION helix.record_steps(wf text, owner text, ids integer[], names text[], outputs text[],
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

-- +goose Down
DROP FUNCTION helix.record_steps(text, text, integer[], text[], text[], text[], bigint[], bigint[]);
