-- +goose Up
-- runs.error_code: the classified code of a failed run (max_steps_exceeded,
-- provider_rate_limited, aborted, …), so a status reader needs no workflow
-- result to tell a failure's kind.
ALTER TABLE helix.runs ADD COLUMN error_code text;

-- +goose Down
ALTER TABLE helix.runs DROP COLUMN error_code;
