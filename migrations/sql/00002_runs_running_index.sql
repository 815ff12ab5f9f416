-- +goose NO TRANSACTION
-- +goose Up
-- The running runs, for the sweep every launched engine runs every few
-- seconds (postgres.ListOrphanRuns: the recorded runs whose workflow was
-- never started, e.g. a run an app recorded in its own transaction, with
-- ExecuteTx, whose wake-up no engine heard). Partial: it holds only the
-- running runs, so the sweep reads as many index entries as there are runs
-- in progress, whatever the table's size. A run's status changes a few
-- times in its life (the step commits do not write its row), so the
-- updates this index takes off the heap-only path are few.
--
-- Built concurrently, so a large helix.runs keeps taking writes meanwhile;
-- an earlier attempt that was interrupted leaves an invalid index of this
-- name, which the DROP removes (goose records the version only once both
-- statements succeed).
DROP INDEX CONCURRENTLY IF EXISTS helix.runs_running_idx;
CREATE INDEX CONCURRENTLY runs_running_idx ON helix.runs (run_id) WHERE status = 'running';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS helix.runs_running_idx;
