-- +goose Up
-- A helix.record_steps call writes one row, not one per record (issue 15,
-- docs/performance.md "Storage and WAL: where the bytes go"): an agent
-- step's tool and commit records, written together, share a row, its
-- primary key entry and its WAL record's headers. A row covers the records
-- id .. id+n-1. With n = 1 its columns are the record's, as before (every
-- row written before this migration). With n > 1:
--   - name is '' and error NULL;
--   - started_at is the first record's start, completed_at the last one's
--     completion;
--   - output is a JSON array of the n records, in ID order, each
--     [name, started, completed, error, output]: started and completed in
--     ms after started_at (0 when it is NULL; negative for a parallel tool
--     that started before the first record), error a string or null, and
--     output the record's JSON text as is (not escaped into a string),
--     left out when it is NULL.
-- helix.step_journal_records shows one row per record.
ALTER TABLE helix.step_journal ADD COLUMN n integer NOT NULL DEFAULT 1;

CREATE VIEW helix.step_journal_records AS
SELECT workflow_id, id, name, output, error, started_at, completed_at
FROM helix.step_journal WHERE n = 1
UNION ALL
SELECT j.workflow_id, j.id + e.i::integer - 1, e.r->>0,
       CASE json_array_length(e.r) WHEN 5 THEN (e.r->4)::text END, e.r->>3,
       coalesce(j.started_at, 0) + (e.r->>1)::bigint, coalesce(j.started_at, 0) + (e.r->>2)::bigint
FROM helix.step_journal j, json_array_elements(j.output::json) WITH ORDINALITY AS e(r, i)
WHERE j.n > 1;

-- The owner check and lock are 00018's, and so is the plain INSERT (no
-- look-up of existing rows: a duplicate is a bug, which fails on the
-- primary key when it starts a row). A call of one record (an agent step's
-- model call) writes it as it is; a call of more writes a row per run of
-- consecutive IDs: one row for the journal's usual call, which holds a run
-- in order (workflows/journal.go), built in a loop, without the grouping
-- query other calls take (parallel tools are recorded as they end, so a
-- step's last one may not be next to its commit). The outputs of a call of
-- more than one record must be JSON text (the journal's always are):
-- another text fails the call (22P02) rather than be stored as something
-- else.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION helix.record_steps(wf text, owner text, ids integer[], names text[], outputs text[],
                                              errs text[], started bigint[], completed bigint[])
RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
    current_owner text;
    k integer := cardinality(ids);
    base bigint := coalesce(started[1], 0);
    packed text := '';
BEGIN
    SELECT owner_xid INTO current_owner FROM dbos.workflow_status WHERE workflow_uuid = wf FOR NO KEY UPDATE;
    IF current_owner IS NULL OR current_owner <> owner THEN
        RAISE EXCEPTION 'workflow % is no longer owned by this execution', wf USING ERRCODE = 'HX409';
    END IF;
    IF k = 1 THEN
        INSERT INTO helix.step_journal (workflow_id, id, name, output, error, started_at, completed_at)
        VALUES (wf, ids[1], names[1], outputs[1], errs[1], started[1], completed[1]);
        RETURN;
    END IF;
    IF array_position(names, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'a step recorded for workflow % has no name', wf USING ERRCODE = 'not_null_violation';
    END IF;
    FOR i IN 1 .. k LOOP
        EXIT WHEN ids[i] IS DISTINCT FROM ids[1] + i - 1;
        packed := packed || ',[' || to_json(names[i])::text
            || ',' || coalesce((started[i] - base)::text, 'null') || ',' || coalesce((completed[i] - base)::text, 'null')
            || ',' || coalesce(to_json(errs[i])::text, 'null') || coalesce(',' || outputs[i]::json::text, '') || ']';
        IF i = k THEN
            INSERT INTO helix.step_journal (workflow_id, id, n, name, output, error, started_at, completed_at)
            VALUES (wf, ids[1], k, '', '[' || substr(packed, 2) || ']', NULL, started[1], completed[k]);
            RETURN;
        END IF;
    END LOOP;
    -- A run's row starts at its first ID only: a record given twice would
    -- overlap rows rather than fail on the primary key.
    IF (SELECT count(DISTINCT x) FROM unnest(ids) AS x) < k THEN
        RAISE EXCEPTION 'a step of workflow % is recorded twice', wf USING ERRCODE = 'unique_violation';
    END IF;
    INSERT INTO helix.step_journal (workflow_id, id, n, name, output, error, started_at, completed_at)
    SELECT wf, min(r.id), count(*),
           CASE count(*) WHEN 1 THEN min(r.name) ELSE '' END,
           CASE count(*) WHEN 1 THEN min(r.output)
               ELSE '[' || string_agg('[' || to_json(r.name)::text
                   || ',' || coalesce((r.s - r.base)::text, 'null') || ',' || coalesce((r.c - r.base)::text, 'null')
                   || ',' || coalesce(to_json(r.err)::text, 'null') || coalesce(',' || r.output::json::text, '') || ']',
                   ',' ORDER BY r.id) || ']' END,
           CASE count(*) WHEN 1 THEN min(r.err) END,
           (array_agg(r.s ORDER BY r.id))[1], (array_agg(r.c ORDER BY r.id DESC))[1]
    FROM (SELECT g.*, coalesce(first_value(g.s) OVER (PARTITION BY g.run ORDER BY g.id), 0) AS base
          FROM (SELECT u.*, u.id - row_number() OVER (ORDER BY u.id) AS run
                FROM unnest(ids, names, outputs, errs, started, completed) AS u(id, name, output, err, s, c)) g) r
    GROUP BY r.run;
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
-- Rows of more than one record become one row per record again.
CREATE TEMPORARY TABLE step_journal_unpacked AS
SELECT r.* FROM helix.step_journal_records r
WHERE EXISTS (SELECT 1 FROM helix.step_journal j
              WHERE j.workflow_id = r.workflow_id AND j.n > 1 AND r.id BETWEEN j.id AND j.id + j.n - 1);
DELETE FROM helix.step_journal WHERE n > 1;
INSERT INTO helix.step_journal (workflow_id, id, name, output, error, started_at, completed_at)
SELECT workflow_id, id, name, output, error, started_at, completed_at FROM step_journal_unpacked;
DROP TABLE step_journal_unpacked;
DROP VIEW helix.step_journal_records;
ALTER TABLE helix.step_journal DROP COLUMN n;
