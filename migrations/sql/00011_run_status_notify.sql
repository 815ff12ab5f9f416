-- +goose Up
-- A run's status change is announced on the helix_run_status channel (the
-- payload is the run ID), so Handle.Result waits for it instead of polling
-- the run record. Only changes of status notify: the per-step updates of a
-- run's counters do not.
-- +goose StatementBegin
CREATE FUNCTION helix.notify_run_status() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_notify('helix_run_status', NEW.run_id);
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd
CREATE TRIGGER runs_status_notify AFTER UPDATE OF status ON helix.runs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION helix.notify_run_status();

-- +goose Down
DROP TRIGGER runs_status_notify ON helix.runs;
DROP FUNCTION helix.notify_run_status();
