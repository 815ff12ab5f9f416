\set ON_ERROR_STOP 1
SELECT set_config('h6.s', :'S', false);
\echo == live relations (whole database: the 1,000-step session + warm-up sessions) ==
SELECT c.relname, c.relkind, pg_relation_size(c.oid) AS main_fork, pg_total_relation_size(c.oid) AS total_incl_idx_toast_fsm
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'helix' AND c.relname IN ('messages','checkpoints','step_journal','stream_chunks','messages_pkey','checkpoints_pkey',
  'checkpoints_session_idx','step_journal_pkey','stream_chunks_pkey','sessions','streams') ORDER BY 2 DESC, 1;
\echo == rows of the 1,000-step session: rows, avg row datum (pg_column_size(t.*), incl. 24 B tuple header), column sizes ==
SELECT 'messages' t, count(*) rows_, round(avg(pg_column_size(m.*)),1) avg_row, round(avg(pg_column_size(session_id)),1) key_col,
       round(avg(pg_column_size(message)),1) payload, round(avg(octet_length(message::text)),1) payload_as_text FROM h6_src_m m
UNION ALL SELECT 'messages (assistant)', count(*), round(avg(pg_column_size(m.*)),1), round(avg(pg_column_size(session_id)),1),
       round(avg(pg_column_size(message)),1), round(avg(octet_length(message::text)),1) FROM h6_src_m m WHERE message->>'role' = 'assistant'
UNION ALL SELECT 'messages (tool)', count(*), round(avg(pg_column_size(m.*)),1), round(avg(pg_column_size(session_id)),1),
       round(avg(pg_column_size(message)),1), round(avg(octet_length(message::text)),1) FROM h6_src_m m WHERE message->>'role' = 'tool'
UNION ALL SELECT 'checkpoints', count(*), round(avg(pg_column_size(c.*)),1), round(avg(pg_column_size(checkpoint_id)+pg_column_size(session_id)+pg_column_size(run_id)),1),
       round(avg(pg_column_size(journal)+pg_column_size(usage)),1), round(avg(octet_length(journal)+octet_length(usage::text)),1) FROM h6_src_c c
UNION ALL SELECT 'step_journal', count(*), round(avg(pg_column_size(j.*)),1), round(avg(pg_column_size(workflow_id)),1),
       round(avg(pg_column_size(output)),1), round(avg(octet_length(output)),1) FROM h6_src_j j
UNION ALL SELECT 'stream_chunks', count(*), round(avg(pg_column_size(s.*)),1), round(avg(pg_column_size(stream_id)+pg_column_size(run_id)),1),
       round(avg(pg_column_size(chunk)),1), round(avg(octet_length(chunk::text)),1) FROM h6_src_s s;
\echo == checkpoint columns ==
SELECT round(avg(pg_column_size(checkpoint_id)),1) id, round(avg(pg_column_size(session_id)),1) sess, round(avg(pg_column_size(run_id)),1) run,
  round(avg(pg_column_size(status)),1) status, round(avg(pg_column_size(custom_state)),1) cstate, round(avg(pg_column_size(usage)),1) usage,
  round(avg(pg_column_size(journal)),1) journal FROM h6_src_c;
\echo == layout A (the rows of the session alone, reloaded): heap B/row incl. line pointer, index B/entry, leaf density ==
SELECT c.relname, pg_relation_size(c.oid) bytes, (pgstatindex(c.oid::regclass)).leaf_pages, (pgstatindex(c.oid::regclass)).internal_pages,
       (pgstatindex(c.oid::regclass)).avg_leaf_density
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'lay_a' AND c.relkind = 'i' ORDER BY c.relname;
SELECT 'messages' t, pg_relation_size('lay_a.messages')::numeric/count(*) heap_b_per_row, pg_indexes_size('lay_a.messages')::numeric/count(*) idx_b_per_entry FROM lay_a.messages
UNION ALL SELECT 'checkpoints', pg_relation_size('lay_a.checkpoints')::numeric/count(*), pg_indexes_size('lay_a.checkpoints')::numeric/count(*)/2 FROM lay_a.checkpoints
UNION ALL SELECT 'step_journal', pg_relation_size('lay_a.step_journal')::numeric/count(*), pg_indexes_size('lay_a.step_journal')::numeric/count(*) FROM lay_a.step_journal
UNION ALL SELECT 'stream_chunks', pg_relation_size('lay_a.stream_chunks')::numeric/count(*), pg_indexes_size('lay_a.stream_chunks')::numeric/count(*) FROM lay_a.stream_chunks;
