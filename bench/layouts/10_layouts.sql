\set ON_ERROR_STOP 1
SELECT set_config('h6.s', :'S', false);
-- ============ A: today's tables, control ============
DROP SCHEMA IF EXISTS lay_a CASCADE; CREATE SCHEMA lay_a;
CREATE TABLE lay_a.messages (LIKE helix.messages INCLUDING ALL);
CREATE TABLE lay_a.checkpoints (LIKE helix.checkpoints INCLUDING ALL);
CREATE TABLE lay_a.step_journal (LIKE helix.step_journal INCLUDING ALL);
CREATE TABLE lay_a.stream_chunks (LIKE helix.stream_chunks INCLUDING ALL);
INSERT INTO lay_a.messages SELECT * FROM h6_src_m ORDER BY seq;
INSERT INTO lay_a.checkpoints SELECT * FROM h6_src_c ORDER BY created_seq;
INSERT INTO lay_a.step_journal SELECT * FROM h6_src_j ORDER BY id;
INSERT INTO lay_a.stream_chunks SELECT * FROM h6_src_s ORDER BY seq;

-- ============ B: model record = the pending assistant message (+ meta), no step_journal row ============
-- meta: [journal record id, started_ms, duration_ms, stopReason, usage] from the call_model record whose messageCount (<o) is the message's seq
DROP SCHEMA IF EXISTS lay_b CASCADE; CREATE SCHEMA lay_b;
CREATE TABLE lay_b.messages (LIKE helix.messages INCLUDING ALL);
ALTER TABLE lay_b.messages ADD COLUMN meta json;
CREATE TABLE lay_b.checkpoints (LIKE helix.checkpoints INCLUDING ALL);
CREATE TABLE lay_b.step_journal (LIKE helix.step_journal INCLUDING ALL);   -- stays, but gets no row per step
CREATE TABLE lay_b.stream_chunks (LIKE helix.stream_chunks INCLUDING ALL);
INSERT INTO lay_b.messages (session_id, seq, message, created_at, meta)
SELECT m.session_id, m.seq, m.message, m.created_at,
       CASE WHEN j.id IS NOT NULL THEN format('[%s,%s,%s,%s,%s]', j.id, j.started_at, j.completed_at - j.started_at,
            to_json(j.output::json->'<a'->>'<b'), j.output::json->'<a'->'<i')::json END
FROM h6_src_m m LEFT JOIN h6_src_j j ON j.name = 'helix.call_model' AND (j.output::json->>'<o')::int = m.seq
ORDER BY m.seq;
INSERT INTO lay_b.checkpoints SELECT * FROM h6_src_c ORDER BY created_seq;
INSERT INTO lay_b.stream_chunks SELECT * FROM h6_src_s ORDER BY seq;

-- ============ C0: B + no per-step chunk row (lifecycle chunks rendered from messages + checkpoint) ============
DROP SCHEMA IF EXISTS lay_c0 CASCADE; CREATE SCHEMA lay_c0;
CREATE TABLE lay_c0.messages (LIKE lay_b.messages INCLUDING ALL);
CREATE TABLE lay_c0.checkpoints (LIKE helix.checkpoints INCLUDING ALL);
CREATE TABLE lay_c0.stream_chunks (LIKE helix.stream_chunks INCLUDING ALL);
INSERT INTO lay_c0.messages SELECT * FROM lay_b.messages ORDER BY seq;
INSERT INTO lay_c0.checkpoints SELECT * FROM h6_src_c ORDER BY created_seq;
-- only the stream's non-step rows remain (run start / end rows: 3 rows for the whole session)
INSERT INTO lay_c0.stream_chunks SELECT * FROM h6_src_s s
 WHERE NOT EXISTS (SELECT 1 FROM h6_src_c c WHERE c.run_id = s.run_id AND c.step_count = s.step AND s.n = 6) ORDER BY seq;

-- ============ C1: B + a per-step marker row (same columns, chunk = [4,<checkpoint created_seq>]) ============
DROP SCHEMA IF EXISTS lay_c1 CASCADE; CREATE SCHEMA lay_c1;
CREATE TABLE lay_c1.messages (LIKE lay_b.messages INCLUDING ALL);
CREATE TABLE lay_c1.checkpoints (LIKE helix.checkpoints INCLUDING ALL);
CREATE TABLE lay_c1.stream_chunks (LIKE helix.stream_chunks INCLUDING ALL);
INSERT INTO lay_c1.messages SELECT * FROM lay_b.messages ORDER BY seq;
INSERT INTO lay_c1.checkpoints SELECT * FROM h6_src_c ORDER BY created_seq;
INSERT INTO lay_c1.stream_chunks
SELECT s.stream_id, s.seq, s.run_id, s.step, s.attempt,
       CASE WHEN c.created_seq IS NULL THEN s.chunk ELSE format('[4,%s]', c.created_seq)::json END, s.created_at, s.n
FROM h6_src_s s LEFT JOIN h6_src_c c ON c.run_id = s.run_id AND c.step_count = s.step AND s.n = 6 ORDER BY s.seq;

-- ============ D: C + bigint session/stream key instead of the 36-char UUID text (heap + index) ============
-- (columns kept in today's positions; the key map is one row per session, not per step)
DROP SCHEMA IF EXISTS lay_d CASCADE; CREATE SCHEMA lay_d;
CREATE TABLE lay_d.messages (session_key bigint NOT NULL, seq integer NOT NULL, message jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(), meta json, PRIMARY KEY (session_key, seq));
CREATE TABLE lay_d.checkpoints (checkpoint_id text PRIMARY KEY, session_key bigint NOT NULL, run_id text,
  step_count integer NOT NULL, message_count integer NOT NULL, stream_sequence bigint, status text NOT NULL,
  custom_state jsonb NOT NULL, output jsonb, created_seq bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),
  usage json, journal text);
CREATE INDEX ON lay_d.checkpoints (session_key, created_seq);
CREATE TABLE lay_d.stream_chunks (stream_key bigint NOT NULL, seq bigint NOT NULL, run_id text, step integer NOT NULL DEFAULT 0,
  attempt integer NOT NULL DEFAULT 0, chunk json NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), n integer NOT NULL DEFAULT 1,
  PRIMARY KEY (stream_key, seq));
INSERT INTO lay_d.messages SELECT 1234567, seq, message, created_at, meta FROM lay_b.messages ORDER BY seq;
INSERT INTO lay_d.checkpoints SELECT checkpoint_id, 1234567, run_id, step_count, message_count, stream_sequence, status,
  custom_state, output, created_seq, created_at, usage, journal FROM h6_src_c ORDER BY created_seq;
INSERT INTO lay_d.stream_chunks SELECT 1234567, seq, run_id, step, attempt, chunk, created_at, n FROM lay_c1.stream_chunks ORDER BY seq;

-- ============ E: C + checkpoints with one index (session_id, created_seq), ID stored compact ============
-- ID = 'cpv1-'||session_id||'-s'||step_count||'-t'||id_ms||'-'||id_rand; checkpoint_id column gone
DROP SCHEMA IF EXISTS lay_e CASCADE; CREATE SCHEMA lay_e;
CREATE TABLE lay_e.messages (LIKE lay_b.messages INCLUDING ALL);
CREATE TABLE lay_e.checkpoints (session_id text NOT NULL, run_id text,
  step_count integer NOT NULL, message_count integer NOT NULL, stream_sequence bigint, status text NOT NULL,
  custom_state jsonb NOT NULL, output jsonb, created_seq bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),
  usage json, journal text, id_ms bigint NOT NULL, id_rand text NOT NULL, PRIMARY KEY (session_id, created_seq));
CREATE TABLE lay_e.stream_chunks (LIKE helix.stream_chunks INCLUDING ALL);
INSERT INTO lay_e.messages SELECT * FROM lay_b.messages ORDER BY seq;
INSERT INTO lay_e.checkpoints SELECT session_id, run_id, step_count, message_count, stream_sequence, status, custom_state, output,
  created_seq, created_at, usage, journal,
  substring(checkpoint_id from '-t([0-9]+)-[^-]+$')::bigint, substring(checkpoint_id from '-([^-]+)$')
  FROM h6_src_c ORDER BY created_seq;
INSERT INTO lay_e.stream_chunks SELECT * FROM lay_c1.stream_chunks ORDER BY seq;
