\set ON_ERROR_STOP 1
SELECT set_config('h6.s', :'S', false);
-- ============ F1: D + E's compact ID, but two narrow indexes (every read index-served) + bigint-keyed marker rows ============
-- ID look-up: parse cpv1-<uuid>-s<step>-t<ms>-<rand>; uuid -> session_key (sessions, one row per session); probe the PK.
DROP SCHEMA IF EXISTS lay_f1 CASCADE; CREATE SCHEMA lay_f1;
CREATE TABLE lay_f1.messages (LIKE lay_d.messages INCLUDING ALL);
CREATE TABLE lay_f1.checkpoints (session_key bigint NOT NULL, step_count integer NOT NULL, id_ms bigint NOT NULL, id_rand text NOT NULL,
  run_id text, message_count integer NOT NULL, stream_sequence bigint, status text NOT NULL,
  custom_state jsonb NOT NULL, output jsonb, created_seq bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),
  usage json, journal text, PRIMARY KEY (session_key, step_count, id_ms, id_rand));
CREATE INDEX ON lay_f1.checkpoints (session_key, created_seq);
CREATE TABLE lay_f1.stream_chunks (LIKE lay_d.stream_chunks INCLUDING ALL);
INSERT INTO lay_f1.messages SELECT * FROM lay_d.messages ORDER BY seq;
INSERT INTO lay_f1.checkpoints SELECT 1234567, step_count,
  substring(checkpoint_id from '-t([0-9]+)-[^-]+$')::bigint, substring(checkpoint_id from '-([^-]+)$'),
  run_id, message_count, stream_sequence, status, custom_state, output, created_seq, created_at, usage, journal
  FROM h6_src_c ORDER BY created_seq;
INSERT INTO lay_f1.stream_chunks SELECT * FROM lay_d.stream_chunks ORDER BY seq;

-- ============ F2: F1 without marker rows; checkpoints get stream_key and an index (stream_key, stream_sequence) instead ============
DROP SCHEMA IF EXISTS lay_f2 CASCADE; CREATE SCHEMA lay_f2;
CREATE TABLE lay_f2.messages (LIKE lay_d.messages INCLUDING ALL);
CREATE TABLE lay_f2.checkpoints (LIKE lay_f1.checkpoints INCLUDING ALL);
ALTER TABLE lay_f2.checkpoints ADD COLUMN stream_key bigint;
CREATE INDEX ON lay_f2.checkpoints (stream_key, stream_sequence);
CREATE TABLE lay_f2.stream_chunks (LIKE lay_d.stream_chunks INCLUDING ALL);
INSERT INTO lay_f2.messages SELECT * FROM lay_d.messages ORDER BY seq;
INSERT INTO lay_f2.checkpoints SELECT *, 1234567 FROM lay_f1.checkpoints ORDER BY created_seq;
INSERT INTO lay_f2.stream_chunks SELECT * FROM lay_d.stream_chunks WHERE chunk::text NOT LIKE '[4,%' ORDER BY seq;

-- ============ F3: F1 + messages.message json (exact text) instead of jsonb + meta as [record id, start - created_at ms, duration] (stopReason implied by the tool calls, usage already in the checkpoint's usage) ============
DROP SCHEMA IF EXISTS lay_f3 CASCADE; CREATE SCHEMA lay_f3;
CREATE TABLE lay_f3.messages (session_key bigint NOT NULL, seq integer NOT NULL, message json NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(), meta json, PRIMARY KEY (session_key, seq));
CREATE TABLE lay_f3.checkpoints (LIKE lay_f1.checkpoints INCLUDING ALL);
CREATE TABLE lay_f3.stream_chunks (LIKE lay_d.stream_chunks INCLUDING ALL);
INSERT INTO lay_f3.messages SELECT session_key, seq, message::text::json, created_at,
  CASE WHEN meta IS NOT NULL THEN format('[%s,%s,%s]', (meta->>0)::int, (meta->>1)::bigint - (extract(epoch from created_at)*1000)::bigint, (meta->>2)::int)::json END
  FROM lay_d.messages ORDER BY seq;
INSERT INTO lay_f3.checkpoints SELECT * FROM lay_f1.checkpoints ORDER BY created_seq;
INSERT INTO lay_f3.stream_chunks SELECT * FROM lay_d.stream_chunks ORDER BY seq;

-- ============ F4: D + E exactly (bigint keys, ONE checkpoint index (session_key, created_seq), compact ID), with markers ============
DROP SCHEMA IF EXISTS lay_f4 CASCADE; CREATE SCHEMA lay_f4;
CREATE TABLE lay_f4.messages (LIKE lay_d.messages INCLUDING ALL);
CREATE TABLE lay_f4.checkpoints (session_key bigint NOT NULL, step_count integer NOT NULL, id_ms bigint NOT NULL, id_rand text NOT NULL,
  run_id text, message_count integer NOT NULL, stream_sequence bigint, status text NOT NULL,
  custom_state jsonb NOT NULL, output jsonb, created_seq bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),
  usage json, journal text, PRIMARY KEY (session_key, created_seq));
CREATE TABLE lay_f4.stream_chunks (LIKE lay_d.stream_chunks INCLUDING ALL);
INSERT INTO lay_f4.messages SELECT * FROM lay_d.messages ORDER BY seq;
INSERT INTO lay_f4.checkpoints SELECT * FROM lay_f1.checkpoints ORDER BY created_seq;
INSERT INTO lay_f4.stream_chunks SELECT * FROM lay_d.stream_chunks ORDER BY seq;

-- ============ A_all: control of the method: every row of the four tables (all sessions) in physical order ============
DROP SCHEMA IF EXISTS lay_aall CASCADE; CREATE SCHEMA lay_aall;
CREATE TABLE lay_aall.messages (LIKE helix.messages INCLUDING ALL);
CREATE TABLE lay_aall.checkpoints (LIKE helix.checkpoints INCLUDING ALL);
CREATE TABLE lay_aall.step_journal (LIKE helix.step_journal INCLUDING ALL);
CREATE TABLE lay_aall.stream_chunks (LIKE helix.stream_chunks INCLUDING ALL);
INSERT INTO lay_aall.messages SELECT * FROM helix.messages ORDER BY ctid;
INSERT INTO lay_aall.checkpoints SELECT * FROM helix.checkpoints ORDER BY ctid;
INSERT INTO lay_aall.step_journal SELECT * FROM helix.step_journal ORDER BY ctid;
INSERT INTO lay_aall.stream_chunks SELECT * FROM helix.stream_chunks ORDER BY ctid;
