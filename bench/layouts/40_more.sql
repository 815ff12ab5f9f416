\set ON_ERROR_STOP 1
SELECT set_config('h6.s', :'S', false);
-- G1: C0 + E (text keys, no per-step stream row, one checkpoint index, compact ID)
DROP SCHEMA IF EXISTS lay_g1 CASCADE; CREATE SCHEMA lay_g1;
CREATE TABLE lay_g1.messages (LIKE lay_b.messages INCLUDING ALL);
CREATE TABLE lay_g1.checkpoints (LIKE lay_e.checkpoints INCLUDING ALL);
CREATE TABLE lay_g1.stream_chunks (LIKE helix.stream_chunks INCLUDING ALL);
INSERT INTO lay_g1.messages SELECT * FROM lay_b.messages ORDER BY seq;
INSERT INTO lay_g1.checkpoints SELECT * FROM lay_e.checkpoints ORDER BY created_seq;
INSERT INTO lay_g1.stream_chunks SELECT * FROM lay_c0.stream_chunks ORDER BY seq;
-- G2: C0 + D (bigint keys, no per-step stream row, today's two checkpoint indexes with the 68-char ID)
DROP SCHEMA IF EXISTS lay_g2 CASCADE; CREATE SCHEMA lay_g2;
CREATE TABLE lay_g2.messages (LIKE lay_d.messages INCLUDING ALL);
CREATE TABLE lay_g2.checkpoints (LIKE lay_d.checkpoints INCLUDING ALL);
CREATE TABLE lay_g2.stream_chunks (LIKE lay_d.stream_chunks INCLUDING ALL);
INSERT INTO lay_g2.messages SELECT * FROM lay_d.messages ORDER BY seq;
INSERT INTO lay_g2.checkpoints SELECT * FROM lay_d.checkpoints ORDER BY created_seq;
INSERT INTO lay_g2.stream_chunks SELECT * FROM lay_d.stream_chunks WHERE chunk::text NOT LIKE '[4,%' ORDER BY seq;
-- G3: F2 + F3 (bigint keys, no marker rows + (stream_key, stream_sequence) index, compact ID with narrow PK, json messages, short meta)
DROP SCHEMA IF EXISTS lay_g3 CASCADE; CREATE SCHEMA lay_g3;
CREATE TABLE lay_g3.messages (LIKE lay_f3.messages INCLUDING ALL);
CREATE TABLE lay_g3.checkpoints (LIKE lay_f2.checkpoints INCLUDING ALL);
CREATE TABLE lay_g3.stream_chunks (LIKE lay_d.stream_chunks INCLUDING ALL);
INSERT INTO lay_g3.messages SELECT * FROM lay_f3.messages ORDER BY seq;
INSERT INTO lay_g3.checkpoints SELECT * FROM lay_f2.checkpoints ORDER BY created_seq;
INSERT INTO lay_g3.stream_chunks SELECT * FROM lay_f2.stream_chunks ORDER BY seq;
-- G4: F2 with text keys (no bigint): B + C0 + compact ID, PK (session_id, step_count, id_ms, id_rand), (session_id, created_seq), (stream_id, stream_sequence)
DROP SCHEMA IF EXISTS lay_g4 CASCADE; CREATE SCHEMA lay_g4;
CREATE TABLE lay_g4.messages (LIKE lay_b.messages INCLUDING ALL);
CREATE TABLE lay_g4.checkpoints (session_id text NOT NULL, step_count integer NOT NULL, id_ms bigint NOT NULL, id_rand text NOT NULL,
  run_id text, message_count integer NOT NULL, stream_sequence bigint, status text NOT NULL,
  custom_state jsonb NOT NULL, output jsonb, created_seq bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),
  usage json, journal text, stream_id text, PRIMARY KEY (session_id, step_count, id_ms, id_rand));
CREATE INDEX ON lay_g4.checkpoints (session_id, created_seq);
CREATE INDEX ON lay_g4.checkpoints (stream_id, stream_sequence);
CREATE TABLE lay_g4.stream_chunks (LIKE helix.stream_chunks INCLUDING ALL);
INSERT INTO lay_g4.messages SELECT * FROM lay_b.messages ORDER BY seq;
INSERT INTO lay_g4.checkpoints SELECT session_id, step_count, id_ms, id_rand, run_id, message_count, stream_sequence, status, custom_state, output,
  created_seq, created_at, usage, journal, session_id FROM lay_e.checkpoints ORDER BY created_seq;
INSERT INTO lay_g4.stream_chunks SELECT * FROM lay_c0.stream_chunks ORDER BY seq;
-- G5: G4 without the stream index (C0 + narrow-PK compact ID, text keys): the stream reader's resume-from-sequence then not index-served
DROP SCHEMA IF EXISTS lay_g5 CASCADE; CREATE SCHEMA lay_g5;
CREATE TABLE lay_g5.messages (LIKE lay_b.messages INCLUDING ALL);
CREATE TABLE lay_g5.checkpoints (LIKE lay_g4.checkpoints INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE lay_g5.checkpoints DROP COLUMN stream_id, ADD PRIMARY KEY (session_id, step_count, id_ms, id_rand);
CREATE INDEX ON lay_g5.checkpoints (session_id, created_seq);
CREATE TABLE lay_g5.stream_chunks (LIKE helix.stream_chunks INCLUDING ALL);
INSERT INTO lay_g5.messages SELECT * FROM lay_b.messages ORDER BY seq;
INSERT INTO lay_g5.checkpoints SELECT session_id, step_count, id_ms, id_rand, run_id, message_count, stream_sequence, status, custom_state, output,
  created_seq, created_at, usage, journal FROM lay_e.checkpoints ORDER BY created_seq;
INSERT INTO lay_g5.stream_chunks SELECT * FROM lay_c0.stream_chunks ORDER BY seq;
-- G6: G3 + run key (bigint) instead of the run's 36-char UUID in checkpoints
DROP SCHEMA IF EXISTS lay_g6 CASCADE; CREATE SCHEMA lay_g6;
CREATE TABLE lay_g6.messages (LIKE lay_g3.messages INCLUDING ALL);
CREATE TABLE lay_g6.checkpoints (LIKE lay_g3.checkpoints INCLUDING ALL);
ALTER TABLE lay_g6.checkpoints ALTER COLUMN run_id TYPE bigint USING NULL;
CREATE TABLE lay_g6.stream_chunks (LIKE lay_g3.stream_chunks INCLUDING ALL);
INSERT INTO lay_g6.messages SELECT * FROM lay_g3.messages ORDER BY seq;
INSERT INTO lay_g6.checkpoints SELECT session_key, step_count, id_ms, id_rand, 7654321, message_count, stream_sequence, status, custom_state, output,
  created_seq, created_at, usage, journal, stream_key FROM lay_g3.checkpoints ORDER BY created_seq;
INSERT INTO lay_g6.stream_chunks SELECT * FROM lay_g3.stream_chunks ORDER BY seq;
-- G7: G6 + the checkpoint's journal referencing the messages: the tool record keeps its duration only (its call ID, name and
-- result are the tool message's), the commit record its empty output (its messageCount is the checkpoint's message_count).
-- Speculative: shows what the journal copy costs; usage is left as it is.
DROP SCHEMA IF EXISTS lay_g7 CASCADE; CREATE SCHEMA lay_g7;
CREATE TABLE lay_g7.messages (LIKE lay_g6.messages INCLUDING ALL);
CREATE TABLE lay_g7.checkpoints (LIKE lay_g6.checkpoints INCLUDING ALL);
CREATE TABLE lay_g7.stream_chunks (LIKE lay_g6.stream_chunks INCLUDING ALL);
INSERT INTO lay_g7.messages SELECT * FROM lay_g6.messages ORDER BY seq;
INSERT INTO lay_g7.checkpoints SELECT session_key, step_count, id_ms, id_rand, run_id, message_count, stream_sequence, status, custom_state, output,
  created_seq, created_at, usage,
  CASE WHEN journal IS NULL THEN NULL ELSE regexp_replace(regexp_replace(journal, '\{"<p":"[^"]*","<q":"[^"]*","<a":\{[^}]*\},("<n":[0-9]+)\}', '{\1}', 'g'),
       '\{"<o":[0-9]+\}', '{}', 'g') END,
  stream_key FROM lay_g6.checkpoints ORDER BY created_seq;
INSERT INTO lay_g7.stream_chunks SELECT * FROM lay_g6.stream_chunks ORDER BY seq;
-- G8: G2 + the stream index (B + C0 + D, today's 68-char checkpoint ID as primary key, (session_key, created_seq),
-- plus stream_key and (stream_key, stream_sequence) for the stream reader): every read index-served, no ID change
DROP SCHEMA IF EXISTS lay_g8 CASCADE; CREATE SCHEMA lay_g8;
CREATE TABLE lay_g8.messages (LIKE lay_d.messages INCLUDING ALL);
CREATE TABLE lay_g8.checkpoints (LIKE lay_d.checkpoints INCLUDING ALL);
ALTER TABLE lay_g8.checkpoints ADD COLUMN stream_key bigint;
CREATE INDEX ON lay_g8.checkpoints (stream_key, stream_sequence);
CREATE TABLE lay_g8.stream_chunks (LIKE lay_d.stream_chunks INCLUDING ALL);
INSERT INTO lay_g8.messages SELECT * FROM lay_d.messages ORDER BY seq;
INSERT INTO lay_g8.checkpoints SELECT *, 1234567 FROM lay_d.checkpoints ORDER BY created_seq;
INSERT INTO lay_g8.stream_chunks SELECT * FROM lay_g2.stream_chunks ORDER BY seq;
-- C1m: C1 with the marker rows' run_id NULL (the checkpoint the marker names has the run)
DROP SCHEMA IF EXISTS lay_c1m CASCADE; CREATE SCHEMA lay_c1m;
CREATE TABLE lay_c1m.messages (LIKE lay_c1.messages INCLUDING ALL);
CREATE TABLE lay_c1m.checkpoints (LIKE lay_c1.checkpoints INCLUDING ALL);
CREATE TABLE lay_c1m.stream_chunks (LIKE lay_c1.stream_chunks INCLUDING ALL);
INSERT INTO lay_c1m.messages SELECT * FROM lay_c1.messages ORDER BY seq;
INSERT INTO lay_c1m.checkpoints SELECT * FROM lay_c1.checkpoints ORDER BY created_seq;
INSERT INTO lay_c1m.stream_chunks SELECT stream_id, seq, CASE WHEN chunk::text LIKE '[4,%' THEN NULL ELSE run_id END, step, attempt, chunk, created_at, n
 FROM lay_c1.stream_chunks ORDER BY seq;
