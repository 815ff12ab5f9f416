\set ON_ERROR_STOP 1
-- h6_interleave(src, dst): the layout's 1,000 steps spread round-robin over 16 sessions (step k -> session k % 16,
-- its local step k / 16), rows written in the original (time) order: 16 concurrent sessions.
-- h6_mkmap(n, reps): step k (k + r * 1002 in repetition r) -> session k % n (uuid and bigint key), local step k / n
DROP FUNCTION IF EXISTS public.h6_mkmap(int);
DROP FUNCTION IF EXISTS public.h6_interleave(text, text);
DROP FUNCTION IF EXISTS public.h6_growth(text);
CREATE OR REPLACE FUNCTION public.h6_mkmap(nsess int, reps int DEFAULT 1) RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  DROP TABLE IF EXISTS public.h6_map;
  CREATE TABLE public.h6_map AS
  SELECT k, k % nsess AS si, k / nsess AS local_k,
         (substr(md5('s'||(k%nsess)),1,8)||'-'||substr(md5('s'||(k%nsess)),9,4)||'-7'||substr(md5('s'||(k%nsess)),14,3)||'-a'||substr(md5('s'||(k%nsess)),18,3)||'-'||substr(md5('s'||(k%nsess)),21,12)) AS uuid,
         1234567 + k % nsess AS skey
  FROM generate_series(0, 1002 * reps - 1) k;
END $fn$;
SELECT public.h6_mkmap(16);
CREATE OR REPLACE FUNCTION public.h6_interleave(src text, dst text, reps int DEFAULT 1) RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE t record; cols text; sel text; kexpr text; col record;
BEGIN
  EXECUTE format('DROP SCHEMA IF EXISTS %I CASCADE', dst);
  EXECUTE format('CREATE SCHEMA %I', dst);
  FOR t IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = src AND c.relkind = 'r' LOOP
    EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I INCLUDING ALL)', dst, t.relname, src, t.relname);
    kexpr := CASE t.relname
      WHEN 'messages' THEN 'CASE WHEN x.seq = 0 THEN 0 ELSE (x.seq - 1) / 2 END'
      WHEN 'checkpoints' THEN 'x.step_count - 1'
      WHEN 'stream_chunks' THEN 'greatest(x.step - 1, 0)'
      WHEN 'step_journal' THEN '((x.output::json->>''<o'')::int - 1) / 2' END;
    cols := ''; sel := '';
    FOR col IN SELECT a.attname, format_type(a.atttypid, a.atttypmod) typ FROM pg_attribute a
               WHERE a.attrelid = format('%I.%I', src, t.relname)::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum LOOP
      cols := cols || CASE WHEN cols = '' THEN '' ELSE ', ' END || quote_ident(col.attname);
      sel := sel || CASE WHEN sel = '' THEN '' ELSE ', ' END || CASE
        WHEN col.attname IN ('session_id', 'stream_id') THEN 'm.uuid'
        WHEN col.attname IN ('session_key', 'stream_key') THEN 'm.skey'
        WHEN col.attname = 'workflow_id' THEN 'm.uuid || ''-turn-1'''
        WHEN col.attname = 'seq' AND t.relname = 'messages' THEN 'm.local_k * 3 + CASE WHEN x.seq = 0 THEN 0 ELSE (x.seq - 1) % 2 + 1 END'
        WHEN col.attname = 'step_count' THEN 'm.local_k + 1'
        WHEN col.attname IN ('created_seq', 'stream_sequence', 'id') OR (col.attname = 'seq' AND t.relname = 'stream_chunks') THEN 'x.' || col.attname || ' + r * 10000000'
        WHEN col.attname = 'checkpoint_id' THEN '''cpv1-'' || m.uuid || ''-s'' || (m.local_k + 1) || substring(x.checkpoint_id from ''(-t[0-9]+-[^-]+)$'')'
        ELSE 'x.' || quote_ident(col.attname) END;
    END LOOP;
    EXECUTE format('INSERT INTO %I.%I (%s) SELECT %s FROM generate_series(0, %s - 1) r CROSS JOIN %I.%I x JOIN public.h6_map m ON m.k = %s + r * 1002 ORDER BY r, x.ctid',
                   dst, t.relname, cols, sel, reps, src, t.relname, kexpr);
  END LOOP;
END $fn$;
-- growth: main forks minus one metapage per index (a per-table, not per-step, cost)
CREATE OR REPLACE FUNCTION public.h6_growth(sch text, steps int DEFAULT 1000) RETURNS numeric LANGUAGE sql AS $$
  SELECT round((sum(bytes) - 8192 * count(*) FILTER (WHERE kind = 'index'))/steps::numeric, 0) FROM public.h6_report(sch) $$;
-- per-step heap / index / total of a schema holding `steps` steps (main forks; minus one metapage per index)
CREATE OR REPLACE FUNCTION public.h6_per(sch text, steps int) RETURNS TABLE(heap numeric, idx numeric, total numeric) LANGUAGE sql AS $$
  SELECT round(sum(bytes) FILTER (WHERE kind = 'heap')/steps::numeric, 0),
         round((coalesce(sum(bytes) FILTER (WHERE kind = 'index'),0) - 8192 * count(*) FILTER (WHERE kind = 'index'))/steps::numeric, 0),
         round((sum(bytes) - 8192 * count(*) FILTER (WHERE kind = 'index'))/steps::numeric, 0) FROM public.h6_report(sch) $$;
