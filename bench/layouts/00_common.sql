-- psql -v S=<session_id> -f ...  ; source rows of the 1,000-step session, in either layout
-- (helix.all_*, migration 00029: the rows of the tables of 00001, with their text IDs)
DROP VIEW IF EXISTS public.h6_src_j CASCADE;
CREATE OR REPLACE VIEW public.h6_src_m AS SELECT * FROM helix.all_messages WHERE session_id = current_setting('h6.s');
CREATE OR REPLACE VIEW public.h6_src_c AS SELECT * FROM helix.all_checkpoints WHERE session_id = current_setting('h6.s');
CREATE OR REPLACE VIEW public.h6_src_j AS SELECT j.* FROM helix.step_journal j JOIN helix.runs r ON r.workflow_id = j.workflow_id WHERE r.session_id = current_setting('h6.s');
CREATE OR REPLACE VIEW public.h6_src_s AS SELECT * FROM helix.all_stream_chunks WHERE stream_id = current_setting('h6.s');
-- per-relation report: heap (main fork), each index, total (pg_total_relation_size), per step (/1000)
CREATE OR REPLACE FUNCTION public.h6_report(sch text) RETURNS TABLE(rel text, kind text, bytes bigint, per_step numeric) LANGUAGE sql AS $$
  SELECT c.relname::text, CASE c.relkind WHEN 'r' THEN 'heap' WHEN 'i' THEN 'index' END,
         pg_relation_size(c.oid) + CASE WHEN c.relkind='r' THEN coalesce(pg_relation_size(c.reltoastrelid),0) ELSE 0 END,
         round((pg_relation_size(c.oid) + CASE WHEN c.relkind='r' THEN coalesce(pg_relation_size(c.reltoastrelid),0) ELSE 0 END)/1000.0,1)
  FROM pg_class c JOIN pg_namespace n ON n.oid=c.relnamespace
  WHERE n.nspname = sch AND c.relkind IN ('r','i') ORDER BY c.relkind DESC, c.relname $$;
CREATE OR REPLACE FUNCTION public.h6_total(sch text) RETURNS TABLE(layout text, heap_per_step numeric, index_per_step numeric, total_per_step numeric, total_check numeric, gap_to_1230 numeric) LANGUAGE sql AS $$
  SELECT sch,
    round(sum(bytes) FILTER (WHERE kind='heap')/1000.0,0), round(coalesce(sum(bytes) FILTER (WHERE kind='index'),0)/1000.0,0),
    round(sum(bytes)/1000.0,0),
    (SELECT round(sum(pg_total_relation_size(c.oid))/1000.0,0) FROM pg_class c JOIN pg_namespace n ON n.oid=c.relnamespace WHERE n.nspname=sch AND c.relkind='r'),
    round(sum(bytes)/1000.0,0) - 1230
  FROM public.h6_report(sch) $$;
