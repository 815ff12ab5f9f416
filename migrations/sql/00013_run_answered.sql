-- +goose Up
-- When a run's wait for people ended (its calls answered, or timed out) and
-- it went on in place: Resume returns a handle on such a run while it is
-- not final, as on a run that still waits (Branch 1), however fast it took
-- its answers.
ALTER TABLE helix.runs ADD COLUMN answered_at timestamptz;

-- +goose Down
ALTER TABLE helix.runs DROP COLUMN answered_at;
