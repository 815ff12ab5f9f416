-- +goose Up
-- A step's commit sent as one statement with the journal's records and
-- COMMIT (store/postgres commitStepSQL) assumes what its engine knows of
-- the session; when that does not hold it writes nothing and raises
-- SQLSTATE HX412, and the engine commits the step again under the locks.
-- +goose StatementBegin
CREATE FUNCTION helix.refuse_step_commit(session text) RETURNS bigint
LANGUAGE plpgsql AS $fn$
BEGIN
    RAISE EXCEPTION 'the commit of a step of session % assumed a state that no longer holds (an interrupt, another writer, an ended session or stream): it wrote nothing', session
        USING ERRCODE = 'HX412', HINT = 'the engine commits the step again under the session''s locks';
END
$fn$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION helix.refuse_step_commit(text);
