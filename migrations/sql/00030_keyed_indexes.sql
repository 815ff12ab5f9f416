-- +goose NO TRANSACTION
-- +goose Up
-- The unique indexes of sessions.key and streams.key (migration 00029),
-- built without blocking writes: a plain CREATE INDEX takes a lock that
-- holds off every insert and update of the table for one scan of it, and
-- every agent step updates its session. Every key is NULL when this runs
-- (only an engine of 00029's release at format level 4 writes one), so the
-- partial indexes start empty; the scan is all they cost. The migrations
-- run under a session-level advisory lock that a waiting process polls
-- for (migrations.Serialize), so no other migrating process holds a
-- snapshot that CONCURRENTLY would wait for.
--
-- If a build fails part way (a cancelled statement, a lost connection),
-- Postgres leaves an invalid index of that name and this migration fails
-- again at the next start with "relation ... already exists": drop it
-- (DROP INDEX CONCURRENTLY helix.sessions_key_idx, or streams_key_idx) and
-- start again.
CREATE UNIQUE INDEX CONCURRENTLY sessions_key_idx ON helix.sessions (key) WHERE key IS NOT NULL;
CREATE UNIQUE INDEX CONCURRENTLY streams_key_idx ON helix.streams (key) WHERE key IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS helix.streams_key_idx;
DROP INDEX CONCURRENTLY IF EXISTS helix.sessions_key_idx;
