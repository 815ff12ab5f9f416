-- +goose Up
-- A step's usage records (its model call, its tools) are stored in the
-- step's checkpoint row, not as rows of helix.usage (issue 15: two usage
-- rows, their primary-key entries and their ON CONFLICT confirmations
-- were about 1 KB of WAL per step; the same records in the checkpoint row,
-- which the step writes anyway, take about 100 bytes).
--
-- checkpoints.usage is a JSON array of compact records (store/postgres,
-- encodeUsage): t source type, n source name, i/o/c/w input, output,
-- cached and cache-write tokens, v value, d duration in ms, e (true) a
-- failure, r/p the run and step when they are not the checkpoint's, and k
-- the key, where "~" stands for ":<run>:<step>" (K: a key kept as is).
-- helix.usage keeps the records written outside a step's commit (client
-- tool waits, answers); helix.usage_records reads both.
ALTER TABLE helix.checkpoints ADD COLUMN usage json;

-- +goose StatementBegin
CREATE FUNCTION helix.checkpoint_usage(sid text, rid text, step integer, recs json, created timestamptz)
RETURNS TABLE (session_id text, run_id text, step integer, source_type text, source_name text,
               input_tokens integer, output_tokens integer, cached_tokens integer, cache_write_tokens integer,
               value double precision, duration_ms bigint, success boolean, key text, created_at timestamptz,
               ord bigint)
LANGUAGE sql IMMUTABLE AS $fn$
    SELECT sid, x.r, x.p, u->>'t', u->>'n',
        COALESCE((u->>'i')::int, 0), COALESCE((u->>'o')::int, 0), COALESCE((u->>'c')::int, 0),
        COALESCE((u->>'w')::int, 0), (u->>'v')::float8, (u->>'d')::bigint, (u->>'e') IS NULL,
        COALESCE(u->>'K', replace(u->>'k', '~', ':' || COALESCE(x.r, '') || ':' || x.p)), created, e.ord
    FROM json_array_elements(recs) WITH ORDINALITY AS e(u, ord),
        LATERAL (SELECT COALESCE(u->>'r', rid) AS r, COALESCE((u->>'p')::int, step) AS p) AS x
$fn$;
-- +goose StatementEnd

-- helix.usage_records: every usage record of every session, in the order
-- they were written within a session (created_at, then seq_a, seq_b). A
-- key is one record per session, as helix.usage's primary key made it
-- before: a checkpoint's record whose key helix.usage holds is left out.
CREATE VIEW helix.usage_records AS
    SELECT session_id, run_id, step, source_type, source_name, input_tokens, output_tokens, cached_tokens,
        cache_write_tokens, value, duration_ms, success, key, created_at, id AS seq_a, 0::bigint AS seq_b
    FROM helix.usage
    UNION ALL
    SELECT u.session_id, u.run_id, u.step, u.source_type, u.source_name, u.input_tokens, u.output_tokens,
        u.cached_tokens, u.cache_write_tokens, u.value, u.duration_ms, u.success, u.key, u.created_at,
        c.created_seq, u.ord
    FROM helix.checkpoints c,
        LATERAL helix.checkpoint_usage(c.session_id, c.run_id, c.step_count, c.usage, c.created_at) AS u
    WHERE c.usage IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM helix.usage x WHERE x.session_id = u.session_id AND x.key = u.key);

-- +goose Down
INSERT INTO helix.usage (session_id, run_id, step, source_type, source_name, input_tokens, output_tokens,
    cached_tokens, cache_write_tokens, value, duration_ms, success, key, created_at)
SELECT u.session_id, u.run_id, u.step, u.source_type, u.source_name, u.input_tokens, u.output_tokens,
    u.cached_tokens, u.cache_write_tokens, u.value, u.duration_ms, u.success, u.key, u.created_at
FROM helix.checkpoints c,
    LATERAL helix.checkpoint_usage(c.session_id, c.run_id, c.step_count, c.usage, c.created_at) AS u
WHERE c.usage IS NOT NULL
ORDER BY c.created_seq, u.ord
ON CONFLICT (session_id, key) DO NOTHING;
DROP VIEW helix.usage_records;
DROP FUNCTION helix.checkpoint_usage(text, text, integer, json, timestamptz);
ALTER TABLE helix.checkpoints DROP COLUMN usage;
