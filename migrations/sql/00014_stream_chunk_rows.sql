-- +goose Up
-- A row of stream_chunks packs the n chunks one statement appended to one
-- stream for one run, step and attempt: seq is the last one's sequence, the
-- first's is seq - n + 1. With n = 1 the row holds the chunk itself, as
-- every row written before this migration does; with n > 1 it holds a JSON
-- array: the fields all its chunks share, then each chunk without them
-- (store/postgres/chunkpack.go).
ALTER TABLE helix.stream_chunks ADD COLUMN n int NOT NULL DEFAULT 1 CHECK (n >= 1);

-- +goose Down
-- One row per chunk again (field order within a chunk may change).
CREATE TEMP TABLE unpacked ON COMMIT DROP AS
SELECT c.stream_id, c.seq - c.n + e.i - 1 AS seq, c.run_id, c.step, c.attempt,
	((c.chunk -> 0)::jsonb || e.v::jsonb)::json AS chunk, c.created_at
FROM helix.stream_chunks c, json_array_elements(c.chunk) WITH ORDINALITY AS e(v, i)
WHERE c.n > 1 AND e.i > 1;
DELETE FROM helix.stream_chunks WHERE n > 1;
INSERT INTO helix.stream_chunks (stream_id, seq, run_id, step, attempt, chunk, created_at)
SELECT stream_id, seq, run_id, step, attempt, chunk, created_at FROM unpacked;
ALTER TABLE helix.stream_chunks DROP COLUMN n;
