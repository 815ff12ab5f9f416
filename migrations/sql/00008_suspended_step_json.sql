-- +goose Up
-- suspended_step keeps the record's text as written (json, not jsonb): the
-- tool results it holds become messages when the step finishes, in another
-- execution than the one that suspended it (a queued run's next segment, a
-- resume), and jsonb would re-format them (spaces, key order), so a
-- transcript would depend on which execution finished the step. Rewrites
-- helix.sessions (an exclusive lock for about a second per million rows).
ALTER TABLE helix.sessions ALTER COLUMN suspended_step TYPE json USING suspended_step::json;

-- +goose Down
ALTER TABLE helix.sessions ALTER COLUMN suspended_step TYPE jsonb USING suspended_step::jsonb;
