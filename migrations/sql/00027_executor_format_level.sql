-- +goose Up
-- The storage format level each engine reads (store/postgres
-- format_level.go): a replica writes a format only once every live
-- executor reads it, so old and new releases run side by side through a
-- rolling deploy. NULL, as in the rows of earlier releases, is level 0.
--
-- A row's level holds for the process that claimed the row: a claim or a
-- rejoin (which set started_at) clears it, and an engine of this release
-- sets its own in the statement after. A process of an earlier release that
-- takes over a row an engine of this release held (a fixed executor ID, a
-- rollback) writes no level, so the row reads 0 and not its predecessor's.
ALTER TABLE helix.executors ADD COLUMN format_level smallint;

-- +goose StatementBegin
CREATE FUNCTION helix.executors_format_level_reset() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    NEW.format_level := NULL;
    RETURN NEW;
END
$fn$;
-- +goose StatementEnd

CREATE TRIGGER executors_format_level_reset BEFORE UPDATE ON helix.executors
    FOR EACH ROW WHEN (NEW.started_at IS DISTINCT FROM OLD.started_at)
    EXECUTE FUNCTION helix.executors_format_level_reset();

-- +goose Down
DROP TRIGGER executors_format_level_reset ON helix.executors;
DROP FUNCTION helix.executors_format_level_reset();
ALTER TABLE helix.executors DROP COLUMN format_level;
