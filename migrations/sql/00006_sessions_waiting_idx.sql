-- +goose Up
-- The engine's wake-up sweep (engine/wakeups.go) reads, every second, the
-- sessions with tool calls waiting for human input: index just those.
CREATE INDEX sessions_waiting_idx ON helix.sessions (session_id) WHERE pending_client_tool_calls <> '{}'::jsonb;

-- +goose Down
DROP INDEX helix.sessions_waiting_idx;
