-- +goose Up
-- suspended_step: the engine's record of a step suspended on human input
-- (its model answer and the tool results already known), so a fresh resume
-- workflow can finish the step. Opaque to the store.
ALTER TABLE helix.sessions ADD COLUMN suspended_step jsonb;

-- +goose Down
ALTER TABLE helix.sessions DROP COLUMN suspended_step;
