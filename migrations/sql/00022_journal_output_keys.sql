-- +goose Up
-- Step journal outputs are stored with their frequent keys coded:
-- `"result":` as `"<a":` (issue 15; workflows/journalcodec.go, whose key
-- table this repeats in the same order: the key at position i, from 1, is
-- coded as '<' and the i-th of a..z, A..Z, 0..9). helix.journal_output
-- expands an output as the journal does; helix.step_journal_records shows
-- outputs expanded.
-- +goose StatementBegin
CREATE FUNCTION helix.journal_output(stored text) RETURNS text LANGUAGE plpgsql IMMUTABLE STRICT AS $fn$
DECLARE
    keys constant text[] := ARRAY[
        'result', 'type', 'content', 'toolCalls', 'id', 'name', 'arguments', 'stopReason',
        'usage', 'inputTokens', 'outputTokens', 'cachedTokens', 'cacheWriteTokens', 'durationMs', 'messageCount', 'toolCallId',
        'toolName', 'error', 'errorCode', 'checkpointId', 'failure', 'output', 'model', 'thinking',
        'patches', 'recorded', 'denied', 'finishWith', 'interrupted', 'continued', 'inbox', 'role'];
    codes constant text := 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';
    out text := stored;
BEGIN
    IF position('"<' IN stored) = 0 THEN
        RETURN stored;
    END IF;
    FOR i IN 1 .. cardinality(keys) LOOP
        out := replace(out, '"<' || substr(codes, i, 1) || '":', '"' || keys[i] || '":');
    END LOOP;
    RETURN out;
END
$fn$;
-- +goose StatementEnd

CREATE OR REPLACE VIEW helix.step_journal_records AS
SELECT workflow_id, id, name, helix.journal_output(output) AS output, error, started_at, completed_at
FROM helix.step_journal WHERE n = 1
UNION ALL
SELECT j.workflow_id, j.id + e.i::integer - 1, e.r->>0,
       helix.journal_output(CASE json_array_length(e.r) WHEN 5 THEN (e.r->4)::text END), e.r->>3,
       coalesce(j.started_at, 0) + (e.r->>1)::bigint, coalesce(j.started_at, 0) + (e.r->>2)::bigint
FROM helix.step_journal j, json_array_elements(j.output::json) WITH ORDINALITY AS e(r, i)
WHERE j.n > 1;

-- +goose Down
CREATE OR REPLACE VIEW helix.step_journal_records AS
SELECT workflow_id, id, name, output, error, started_at, completed_at
FROM helix.step_journal WHERE n = 1
UNION ALL
SELECT j.workflow_id, j.id + e.i::integer - 1, e.r->>0,
       CASE json_array_length(e.r) WHEN 5 THEN (e.r->4)::text END, e.r->>3,
       coalesce(j.started_at, 0) + (e.r->>1)::bigint, coalesce(j.started_at, 0) + (e.r->>2)::bigint
FROM helix.step_journal j, json_array_elements(j.output::json) WITH ORDINALITY AS e(r, i)
WHERE j.n > 1;
DROP FUNCTION helix.journal_output(text);
