-- +goose Up
-- Fewer index writes per agent step (issue 15, WAL and storage):
--
-- * sessions: the commit of every step wrote a new entry in each of the
--   sessions' indexes, because (status, updated_at) indexed a column each
--   update changes. The list of sessions orders by created_at, which does
--   not change: with (status, created_at) instead, a step's updates of its
--   session are HOT (heap-only), and pages keep room for them.
-- * usage: its bigserial primary key and its (source_type, source_name)
--   index served no query (metrics scan the table, lists go by session);
--   (session_id, key), which made replays idempotent, is the primary key.
-- * record_steps inserts without ON CONFLICT (a speculative insertion
--   writes a second WAL record per row): under the owner's row lock, a
--   check first is as safe.
DROP INDEX helix.sessions_status_updated_idx;
CREATE INDEX sessions_status_created_idx ON helix.sessions (status, created_at);
ALTER TABLE helix.sessions SET (fillfactor = 80);

DROP INDEX helix.usage_source_idx;
ALTER TABLE helix.usage DROP CONSTRAINT usage_pkey;
ALTER TABLE helix.usage DROP CONSTRAINT usage_session_id_key_key;
ALTER TABLE helix.usage ADD CONSTRAINT usage_pkey PRIMARY KEY (session_id, key);

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

ALTER TABLE helix.usage DROP CONSTRAINT usage_pkey;
ALTER TABLE helix.usage ADD CONSTRAINT usage_session_id_key_key UNIQUE (session_id, key);
ALTER TABLE helix.usage ADD CONSTRAINT usage_pkey PRIMARY KEY (id);
CREATE INDEX usage_source_idx ON helix.usage (source_type, source_name);

ALTER TABLE helix.sessions RESET (fillfactor);
DROP INDEX helix.sessions_status_created_idx;
CREATE INDEX sessions_status_updated_idx ON helix.sessions (status, updated_at);
