-- +goose Up
-- How a run is admitted (engine.Config.Queue): the DBOS queue, partition
-- and priority its segments wait with; NULL for a run that starts at once.
-- Recorded with the run, so whichever engine starts it (a run recorded by a
-- process that died before starting it) admits it the same way.
ALTER TABLE helix.runs
    ADD COLUMN queue               text,
    ADD COLUMN queue_partition_key text,
    ADD COLUMN queue_priority      integer;

-- +goose Down
ALTER TABLE helix.runs
    DROP COLUMN queue_priority,
    DROP COLUMN queue_partition_key,
    DROP COLUMN queue;
