-- +goose NO TRANSACTION
-- +goose Up
-- The wake-up sweep's index (engine/wakeups.go; 00006) becomes one on
-- sessions with a suspended step (suspended_step_id IS NOT NULL), a set
-- that holds every session with pending calls (the store writes '' for a
-- suspension without a step ID; NULL and '' read the same). 00006's
-- predicate named pending_client_tool_calls, and Postgres makes an update
-- heap-only (no new entry in any of the table's indexes) only when no
-- column an index or its predicate names changes: an answer's submission
-- and the run's taking of it rewrite the pending calls without leaving the
-- set, and each wrote a new entry in every index of helix.sessions (about
-- 1.2 KB of WAL per update). The suspension and its end still enter and
-- leave the set.
--
-- An engine of an earlier release sweeps by 00006's condition alone, so
-- until it is replaced (a rolling deploy) its sweep reads helix.sessions
-- without an index each second; the Down builds 00006's index again.
--
-- Built and dropped without blocking writes (as 00030; if the build fails
-- part way, drop the invalid helix.sessions_suspended_idx and start
-- again).
UPDATE helix.sessions SET suspended_step_id = ''
WHERE pending_client_tool_calls <> '{}'::jsonb AND suspended_step_id IS NULL;
CREATE INDEX CONCURRENTLY sessions_suspended_idx ON helix.sessions (session_id) WHERE suspended_step_id IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS helix.sessions_waiting_idx;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS sessions_waiting_idx ON helix.sessions (session_id) WHERE pending_client_tool_calls <> '{}'::jsonb;
DROP INDEX CONCURRENTLY IF EXISTS helix.sessions_suspended_idx;
