-- +goose Up
-- The helix schema: every table, function and view helix-dbos keeps next to
-- DBOS's own "dbos" schema. migrations.Up creates the schema itself before
-- goose runs, so that goose's version table (helix.schema_migrations) can
-- live inside it. docs/storage.md describes each table, which statement
-- writes it and which reads it.
--
-- The layout in one sentence: a session and its stream get an integer key
-- from helix.session_keys when they are created; the three tables every
-- step appends to (messages, checkpoints, stream_chunks) are keyed by it,
-- not by the 36-byte IDs, and a checkpoint's ID
-- (cpv1-{session}-s{step}-t{ms}-{rand}) is rendered from its columns.

CREATE SEQUENCE helix.session_keys;

-- sessions: one row per session (conversation). Stored with fillfactor 80:
-- a running session's updates are heap-only (no index names a column a
-- step, a suspension or an answer changes), so a waiting session's row has
-- one entry in each index. session_id sorts byte-wise (COLLATE "C"), and so
-- does every column that holds a session ID: a join of two of them
-- compares in one collation, which each side's index serves (an index
-- serves a comparison only in its own collation).
CREATE TABLE helix.sessions (
    session_id                  text        COLLATE "C" PRIMARY KEY,
    agent_type                  text        NOT NULL,
    stream_id                   text        NOT NULL,
    parent_session_id           text COLLATE "C",
    root_session_id             text COLLATE "C" NOT NULL,
    status                      text        NOT NULL DEFAULT 'active'
        CHECK (status IN ('active', 'completed', 'failed', 'interrupted', 'paused')),
    step_count                  integer     NOT NULL DEFAULT 0,
    message_count               integer     NOT NULL DEFAULT 0,
    custom_state                jsonb       NOT NULL DEFAULT '{}',
    output                      jsonb,
    error                       text,
    failure_reason              text,
    interrupt_context           jsonb,
    pending_client_tool_calls   jsonb       NOT NULL DEFAULT '{}',
    suspended_awaiting_children jsonb       NOT NULL DEFAULT '{}',
    suspended_step_id           text,
    completed_client_tool_calls jsonb       NOT NULL DEFAULT '{}',
    client_tool_call_ownership  jsonb       NOT NULL DEFAULT '{}',
    interrupt_requested         boolean     NOT NULL DEFAULT false,
    interrupt_reason            text,
    mode                        text        CHECK (mode IN ('standard', 'persistent')),
    version                     bigint      NOT NULL DEFAULT 1,
    resume_count                integer     NOT NULL DEFAULT 0,
    checkpoint_id               text,
    checkpointed_at             timestamptz,
    checkpoint_source           text,
    metadata                    jsonb       NOT NULL DEFAULT '{}',
    tags                        text[]      NOT NULL DEFAULT '{}',
    user_id                     text,
    tracing_context             jsonb,
    expires_at                  timestamptz,
    created_at                  timestamptz NOT NULL DEFAULT now(),
    updated_at                  timestamptz NOT NULL DEFAULT now(),
    -- json, not jsonb: the tool results it holds keep their exact text when
    -- another execution finishes the step.
    suspended_step              json,
    key                         bigint      NOT NULL DEFAULT nextval('helix.session_keys') UNIQUE
) WITH (fillfactor = 80);

COMMENT ON COLUMN helix.sessions.checkpoint_id IS
    'the ID of the session''s most recently written checkpoint (every writer of a checkpoint moves it in the same transaction)';
COMMENT ON COLUMN helix.sessions.updated_at IS
    'last change but a step commit; the session''s last change (API updatedAt, retention''s last activity) is greatest(updated_at, checkpointed_at), a step commit writing only checkpointed_at';
COMMENT ON COLUMN helix.sessions.key IS
    'the session''s key in helix.messages and helix.checkpoints';

CREATE INDEX sessions_parent_idx ON helix.sessions (parent_session_id) WHERE parent_session_id IS NOT NULL;
-- The sessions under a root (a root is its own root: its row is read by its
-- primary key, and takes no room here).
CREATE INDEX sessions_root_idx ON helix.sessions (root_session_id) WHERE parent_session_id IS NOT NULL;
CREATE INDEX sessions_user_idx ON helix.sessions (user_id) WHERE user_id IS NOT NULL;
CREATE INDEX sessions_expires_idx ON helix.sessions (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX sessions_status_created_idx ON helix.sessions (status, created_at);
-- The inspector's listings of root sessions (a listing by ID prefix reads
-- the primary key: session_id sorts byte-wise, COLLATE "C").
CREATE INDEX sessions_roots_created_idx ON helix.sessions (created_at, session_id) WHERE parent_session_id IS NULL;
CREATE INDEX sessions_roots_agent_created_idx ON helix.sessions (agent_type, created_at, session_id) WHERE parent_session_id IS NULL;
-- A listing by user filters on user_id = $1, which implies the predicate:
-- the roots with no user (most, in deployments without users) have no entry.
CREATE INDEX sessions_roots_user_created_idx ON helix.sessions (user_id, created_at, session_id)
    WHERE parent_session_id IS NULL AND user_id IS NOT NULL;

-- +goose StatementBegin
-- mode is write-once. An AFTER trigger limited to the column: a BEFORE
-- UPDATE row trigger makes Postgres lock the row before every update.
CREATE FUNCTION helix.sessions_mode_write_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.mode IS NOT NULL AND NEW.mode IS DISTINCT FROM OLD.mode THEN
        RAISE EXCEPTION 'helix: session % mode is write-once (is %, refused %)', OLD.session_id, OLD.mode, NEW.mode
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER sessions_mode_write_once AFTER UPDATE OF mode ON helix.sessions
    FOR EACH ROW WHEN (OLD.mode IS DISTINCT FROM NEW.mode) EXECUTE FUNCTION helix.sessions_mode_write_once();

-- messages: the append-only conversation log; seq is the 0-based index.
-- Rows at seq >= sessions.message_count are pending model records, not
-- messages: a model call's record written as the step's assistant row
-- before the step's commit counts it; every reader stops at the count.
-- meta holds what the record adds to the message (docs/storage.md). No
-- foreign key (it would lock the session's row once more per step): the
-- statement trigger on sessions deletes a session's rows, and every
-- statement that appends locks or updates the session's row first.
CREATE TABLE helix.messages (
    session_key bigint      NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    seq         integer     NOT NULL,
    message     jsonb       NOT NULL,
    meta        json,
    PRIMARY KEY (session_key, seq)
);

-- runs: one row per Execute / Resume / Retry (and companion consultation).
-- Stored with fillfactor 90, and no index names its status: a change of
-- status alone (a suspension, an answer) is heap-only, the run's ending
-- being completed_at (set exactly when the status is final, CHECK below).
CREATE TABLE helix.runs (
    run_id              text        PRIMARY KEY,
    session_id          text COLLATE "C" NOT NULL REFERENCES helix.sessions (session_id) ON DELETE CASCADE,
    turn                integer     NOT NULL,
    status              text        NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'interrupted',
        'suspended_client_tool', 'suspended_awaiting_children', 'suspended_step_partial')),
    step_count          integer     NOT NULL DEFAULT 0,
    start_sequence      bigint      NOT NULL DEFAULT 0,
    workflow_id         text,
    previous_run_id     text,
    error               text,
    started_at          timestamptz NOT NULL DEFAULT now(),
    completed_at        timestamptz,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    error_code          text,
    queue               text,
    queue_partition_key text,
    queue_priority      integer,
    answered_at         timestamptz,
    -- Hibernation (docs/engine.md): hibernated_at is set while the run waits
    -- for people with no workflow running it; wake_at is the earliest
    -- deadline of the calls it waits for (Unix ms, NULL for none), when the
    -- engines' sweep wakes it; woken_at is set by a wake until continuation
    -- number wakes (workflow ID helix.wake_workflow_id) begins.
    hibernated_at       timestamptz,
    wake_at             bigint,
    woken_at            timestamptz,
    wakes               integer     NOT NULL DEFAULT 0,
    -- The tools the run's agent's tool sources (MCP servers) listed when the
    -- run began (steps.PinnedTools), which every step, segment,
    -- continuation and the resume that finishes its suspended step offer
    -- the model; NULL for an agent without sources.
    tools               jsonb,
    UNIQUE (session_id, turn),
    CONSTRAINT runs_ended_check CHECK ((completed_at IS NOT NULL) = (status IN ('completed', 'failed', 'interrupted')))
) WITH (fillfactor = 90);
CREATE INDEX runs_workflow_idx ON helix.runs (workflow_id) WHERE workflow_id IS NOT NULL;
-- The hibernated runs with a deadline, for the engines' wake sweep, and the
-- woken runs whose continuation has not begun, for the starter's sweep:
-- both as small as the runs in that state.
CREATE INDEX runs_wake_at_idx ON helix.runs (wake_at) WHERE hibernated_at IS NOT NULL AND wake_at IS NOT NULL;
CREATE INDEX runs_woken_idx ON helix.runs (run_id) WHERE woken_at IS NOT NULL;
-- The runs in progress that are not hibernated (a workflow of theirs runs
-- or is due), for the sweeps every launched engine runs every few seconds:
-- the sessions cancelled with DBOS's tools
-- (postgres.ListSessionsCancelledThroughDBOS) and the running runs whose
-- workflow was never started (postgres.ListOrphanRuns: e.g. a run an app
-- recorded in its own transaction with ExecuteTx, whose announcement no
-- engine heard). As small as the runs held live, whatever the number of
-- hibernated or ended ones.
CREATE INDEX runs_live_idx ON helix.runs (run_id) WHERE hibernated_at IS NULL AND completed_at IS NULL;

-- +goose StatementBegin
-- helix.wake_workflow_id is the workflow ID of continuation n (1, 2, ...)
-- of the run whose workflow is wf (workflows.WakeID).
CREATE FUNCTION helix.wake_workflow_id(wf text, n integer) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT wf || '-wake-' || n $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.current_workflow_id is the workflow that runs a run now, or ran it
-- last: its own (wf), or its continuation number wakes after a wake from
-- hibernation (store.Run.CurrentWorkflowID).
CREATE FUNCTION helix.current_workflow_id(wf text, wakes integer) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT CASE WHEN wakes > 0 THEN helix.wake_workflow_id(wf, wakes) ELSE wf END $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.run_workflow_ids lists the workflows that ran the run whose
-- workflow is wf: wf and each of its continuations (by the run's wakes).
-- A queued run's segments are children of one of them (its driver's, or a
-- continuation's of a hibernated driver).
CREATE FUNCTION helix.run_workflow_ids(wf text) RETURNS text[]
LANGUAGE sql STABLE AS $$
    SELECT wf || ARRAY(SELECT helix.wake_workflow_id(wf, n) FROM generate_series(1,
        coalesce((SELECT max(r.wakes) FROM helix.runs r WHERE r.workflow_id = wf), 0)) n)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.announces_after_commit reports whether the transaction leaves its
-- NOTIFYs to a statement after its COMMIT (SET LOCAL
-- helix.announce_after_commit = on; helix.announce, helix.announce_pending).
-- Postgres takes its notification queue lock at the commit of a
-- transaction that notifies and holds it until the commit record is
-- flushed, so the commits of every notifying transaction of the cluster
-- wait for each other's disk flush; a transaction that only notifies
-- writes no WAL and holds the lock for microseconds (docs/performance.md,
-- "The notification lock").
CREATE FUNCTION helix.announces_after_commit() RETURNS boolean
LANGUAGE sql STABLE AS $$ SELECT coalesce(current_setting('helix.announce_after_commit', true), '') = 'on' $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.announce sends NOTIFY payload on channel: at once (delivered at
-- the transaction's commit), or, when the transaction announces after its
-- commit, by the caller's helix.announce_pending after the COMMIT. The
-- pending announcements are kept in a session setting, which a rollback
-- reverts with the transaction.
CREATE FUNCTION helix.announce(channel text, payload text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF helix.announces_after_commit() THEN
        PERFORM set_config('helix.unannounced',
            coalesce(current_setting('helix.unannounced', true), '') || channel || E'\x1f' || payload || E'\x1e', false);
    ELSE
        PERFORM pg_notify(channel, payload);
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.announce_pending sends the announcements the session's committed
-- transactions left to it (helix.announce) and returns how many. Run
-- after the COMMIT, as a transaction of its own, it writes no WAL: its
-- commit flushes nothing under the notification lock.
CREATE FUNCTION helix.announce_pending() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    pending text := coalesce(current_setting('helix.unannounced', true), '');
    n integer := 0;
    e text;
BEGIN
    IF pending = '' THEN
        RETURN 0;
    END IF;
    PERFORM set_config('helix.unannounced', '', false);
    FOR e IN SELECT DISTINCT x FROM unnest(string_to_array(rtrim(pending, E'\x1e'), E'\x1e')) x LOOP
        PERFORM pg_notify(split_part(e, E'\x1f', 1), substr(e, strpos(e, E'\x1f') + 1));
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.wake_run wakes the hibernated run whose workflow is wf, if any,
-- and returns its announcement (NULL when it woke none): its next
-- continuation is due, announced on helix_run_recorded (a woken run is
-- started like a recorded one; helix.announce). The
-- announcement carries what starting the continuation needs, tab-separated:
-- run ID, session ID, workflow ID, the continuation's number, the agent
-- type and a queued run's admission (queue, partition key, priority; empty
-- and 0 for a run that starts at once) (store/postgres's
-- ParseWakeAnnouncement), so that a starter reads nothing more. Called by
-- every message sent to a run (helix.send_tool_message, which returns it:
-- the sender may start the continuation at once) and by the deadline
-- sweep. With announce false the caller announces it after its commit,
-- off its write path (store/postgres's Store.Announce). answered, when not
-- NULL, is a run whose last waiting call the caller's transaction answered:
-- its return to running (status, answered_at) is written here too, in the
-- wake's update of its row when that is the run woken (one row version
-- instead of two), by an update of its own otherwise (a live wait). With
-- asleep_only it wakes only a hibernated run that is not queued, whose row
-- its update locks, and otherwise writes nothing and returns NULL
-- (helix.send_tool_message then locks the row and decides).
CREATE FUNCTION helix.wake_run(wf text, announce boolean DEFAULT true, answered text DEFAULT NULL,
    asleep_only boolean DEFAULT false) RETURNS text
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    woke text;
BEGIN
    -- The run's row is locked whatever its state: a hibernation locks it
    -- too (postgres.HibernateRun) before it looks for messages, so a
    -- message sent in this transaction is either seen by a hibernation
    -- that locked the row after it (which then does not hibernate), or
    -- wakes one that locked it before (this waits for its commit, then
    -- sees the run hibernated).
    IF NOT asleep_only THEN
        PERFORM 1 FROM helix.runs WHERE workflow_id = wf FOR NO KEY UPDATE;
    END IF;
    UPDATE helix.runs r SET hibernated_at = NULL, wake_at = NULL, woken_at = now(), wakes = r.wakes + 1,
        status = CASE WHEN r.run_id = answered AND r.status = 'suspended_client_tool' THEN 'running' ELSE r.status END,
        answered_at = CASE WHEN r.run_id = answered AND r.status = 'suspended_client_tool' THEN now() ELSE r.answered_at END,
        updated_at = CASE WHEN r.run_id = answered AND r.status = 'suspended_client_tool' THEN now() ELSE r.updated_at END
    FROM helix.sessions s
    WHERE r.workflow_id = wf AND r.hibernated_at IS NOT NULL AND r.status NOT IN ('completed', 'failed', 'interrupted')
      AND (r.queue IS NULL OR NOT asleep_only) AND s.session_id = r.session_id
    RETURNING concat_ws(E'\t', r.run_id, r.session_id, r.workflow_id, r.wakes, s.agent_type,
        coalesce(r.queue, ''), coalesce(r.queue_partition_key, ''), coalesce(r.queue_priority, 0)) INTO woke;
    IF woke IS NOT NULL AND announce THEN
        PERFORM helix.announce('helix_run_recorded', woke);
    END IF;
    IF answered IS NOT NULL AND ((woke IS NULL AND NOT asleep_only) OR split_part(woke, E'\t', 1) <> answered) THEN
        UPDATE helix.runs SET status = 'running', answered_at = now(), updated_at = now()
        WHERE run_id = answered AND status = 'suspended_client_tool';
    END IF;
    RETURN woke;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A run's status change wakes the engines waiting on it (LISTEN helix_run_status).
-- A sub-agent's run that ends wakes its parent's run when that hibernated
-- while it waited for its sub-agents (postgres.HibernateForChildren). The
-- parent's run row is locked whatever its state: under REPEATABLE READ or
-- SERIALIZABLE (a transactional tool's isolation), a hibernation committed
-- after this transaction's snapshot then fails it with a serialization
-- error, and it runs again, instead of missing the wake.
CREATE FUNCTION helix.notify_run_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Announced when a waiter on the run returns (engine.Handle: an end,
    -- a suspension); not on its return to running, which wakes nobody.
    IF NEW.status <> 'running' THEN
        PERFORM helix.announce('helix_run_status', NEW.run_id);
    END IF;
    IF NEW.status IN ('completed', 'failed', 'interrupted') THEN
        PERFORM helix.wake_run(p.workflow_id) FROM (SELECT r.workflow_id, r.hibernated_at FROM helix.sessions s
                JOIN helix.runs r ON r.session_id = s.parent_session_id
                WHERE s.session_id = NEW.session_id AND r.status NOT IN ('completed', 'failed', 'interrupted')
                FOR UPDATE OF r) p
            WHERE p.hibernated_at IS NOT NULL;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER runs_status_notify AFTER UPDATE OF status ON helix.runs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION helix.notify_run_status();

-- checkpoints: a step's snapshot, keyed by its session's key and the parts
-- of its ID (rendered by helix.checkpoint_id_of, parsed by
-- helix.checkpoint_id_parts). created_seq orders a session's checkpoints
-- (no index: readers read the session's rows by the key prefix). usage: the
-- usage records of the step that wrote it, compact; journal: the step
-- journal's records its commit carries (docs/storage.md).
CREATE SEQUENCE helix.checkpoint_seq;
CREATE TABLE helix.checkpoints (
    session_key     bigint      NOT NULL,
    id_ms           bigint      NOT NULL,
    created_seq     bigint      NOT NULL DEFAULT nextval('helix.checkpoint_seq'),
    stream_sequence bigint,
    created_at      timestamptz NOT NULL DEFAULT now(),
    step_count      integer     NOT NULL,
    message_count   integer     NOT NULL,
    id_rand         text        NOT NULL,
    run_id          text,
    status          text        NOT NULL,
    custom_state    jsonb       NOT NULL,
    output          jsonb,
    usage           json,
    journal         text,
    PRIMARY KEY (session_key, step_count, id_ms, id_rand)
);

-- +goose StatementBegin
-- helix.checkpoint_id_of renders a checkpoint's ID from its columns.
CREATE FUNCTION helix.checkpoint_id_of(sid text, step integer, ms bigint, rand text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'cpv1-' || sid || '-s' || step::text || '-t' || ms::text || '-' || rand
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.checkpoint_id_parts returns {step, ms, rand} of a checkpoint ID of
-- session sid, NULL for an ID that is not one of its.
CREATE FUNCTION helix.checkpoint_id_parts(id text, sid text) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN left(id, length(sid) + 5) = 'cpv1-' || sid
        THEN regexp_match(substr(id, length(sid) + 6), '^-s(0|[1-9][0-9]{0,8})-t(0|[1-9][0-9]{0,17})-([0-9A-Za-z]+)$') END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Deleted sessions take their messages and checkpoints with them.
CREATE FUNCTION helix.delete_session_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM helix.messages m USING gone g WHERE m.session_key = g.key;
    DELETE FROM helix.checkpoints c USING gone g WHERE c.session_key = g.key;
    -- The streams the sessions owned: their own (by the primary key, in
    -- stream_id's collation: session_id's, "C", would leave the key
    -- unusable), and those an app gave them (streams_owner_idx).
    DELETE FROM helix.streams t USING gone g WHERE t.stream_id = g.session_id COLLATE "default" AND t.owner_session_id = g.session_id;
    DELETE FROM helix.streams t USING gone g WHERE t.owner_session_id = g.session_id AND t.owner_session_id <> t.stream_id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER sessions_delete_rows AFTER DELETE ON helix.sessions
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION helix.delete_session_rows();

-- sub_session_refs: a parent's sub-agents and companions.
CREATE TABLE helix.sub_session_refs (
    session_id           text COLLATE "C" NOT NULL REFERENCES helix.sessions (session_id) ON DELETE CASCADE,
    sub_session_id       text COLLATE "C" NOT NULL,
    agent_type           text        NOT NULL,
    parent_tool_call_id  text        NOT NULL,
    status               text        NOT NULL DEFAULT 'running'
        CHECK (status IN ('running', 'completed', 'failed', 'interrupted', 'terminated', 'paused_awaiting_client')),
    mode                 text        NOT NULL DEFAULT 'ephemeral' CHECK (mode IN ('ephemeral', 'persistent')),
    name                 text,
    completion_delivered boolean     NOT NULL DEFAULT false,
    started_at           timestamptz NOT NULL DEFAULT now(),
    completed_at         timestamptz,
    updated_at           timestamptz NOT NULL DEFAULT now(),
    created_seq          bigserial   NOT NULL,
    PRIMARY KEY (session_id, sub_session_id)
);

-- inbox: messages sent to a running companion (message_id: the sending tool call).
CREATE TABLE helix.inbox (
    session_id  text COLLATE "C" NOT NULL REFERENCES helix.sessions (session_id) ON DELETE CASCADE,
    message_id  text        NOT NULL,
    message     jsonb       NOT NULL,
    seq         bigserial   NOT NULL,
    consumed_at timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, message_id)
);
CREATE INDEX inbox_unconsumed_idx ON helix.inbox (session_id, seq) WHERE consumed_at IS NULL;

-- staging: custom-state patches of a step's parallel tools (the store's
-- Staging contract).
CREATE TABLE helix.staging (
    session_id text COLLATE "C" NOT NULL REFERENCES helix.sessions (session_id) ON DELETE CASCADE,
    step_id    text        NOT NULL,
    change_id  text        NOT NULL,
    patches    jsonb       NOT NULL,
    staged_seq bigserial   NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, step_id, change_id)
);

-- streams: one per root session (its sub-agents write into it), whose ID
-- is the session's, and the streams an app creates (CreateStream, with an
-- owner session or none). A stream goes with its owner session: the
-- statement trigger on sessions deletes it (no foreign key, so that the
-- index of owners holds only the streams an app gave another session as
-- owner: a session's own stream is found by its ID).
CREATE TABLE helix.streams (
    stream_id        text        PRIMARY KEY,
    owner_session_id text COLLATE "C",
    status           text        NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'paused', 'ended', 'failed')),
    latest_seq       bigint      NOT NULL DEFAULT 0,
    truncation_epoch integer     NOT NULL DEFAULT 0,
    final_output     jsonb,
    error            text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    -- From the sequence (unique by it): readers reach a stream's chunks
    -- from its row, never a stream from its key, so no index.
    key              bigint      NOT NULL DEFAULT nextval('helix.session_keys')
);
COMMENT ON COLUMN helix.streams.updated_at IS
    'last change but an append; the stream''s last change (API updatedAt) is greatest(updated_at, created_at of its newest stream_chunks row), an append writing only its chunks and latest_seq';
COMMENT ON COLUMN helix.streams.key IS 'the stream''s key in helix.stream_chunks';
CREATE INDEX streams_owner_idx ON helix.streams (owner_session_id) WHERE owner_session_id <> stream_id;

-- stream_chunks: a row holds the n chunks one statement appended to a
-- stream for one run, step and attempt, seq being the last one's; chunk is
-- a marker row, a coded row or a chunk's JSON (store/postgres's chunk
-- codec): read chunks through the store. No foreign key, like messages.
CREATE TABLE helix.stream_chunks (
    stream_key bigint      NOT NULL,
    seq        bigint      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    step       integer     NOT NULL DEFAULT 0,
    attempt    integer     NOT NULL DEFAULT 0,
    n          integer     NOT NULL DEFAULT 1 CHECK (n >= 1),
    run_id     text,
    chunk      json        NOT NULL,
    PRIMARY KEY (stream_key, seq)
);

-- +goose StatementBegin
-- Deleted streams take their chunk rows with them.
CREATE FUNCTION helix.delete_stream_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM helix.stream_chunks c USING gone g WHERE c.stream_key = g.key;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER streams_delete_rows AFTER DELETE ON helix.streams
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION helix.delete_stream_rows();

-- stream_truncations: one row per cleanup that removed chunks.
CREATE TABLE helix.stream_truncations (
    stream_id   text        NOT NULL REFERENCES helix.streams (stream_id) ON DELETE CASCADE,
    epoch       integer     NOT NULL,
    at_step     integer     NOT NULL,
    min_seq     bigint      NOT NULL,
    max_seq     bigint      NOT NULL,
    at_sequence bigint      NOT NULL,
    removed     integer     NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stream_id, epoch)
);

-- stream_write_batches: idempotency tokens of batched chunk writes (pruned after an hour).
CREATE TABLE helix.stream_write_batches (
    batch_id   uuid        PRIMARY KEY,
    streams    text[]      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- usage: usage records written outside a step's commit (a commit's are in
-- its checkpoint row); key makes a replayed record idempotent, id orders a
-- session's rows.
CREATE TABLE helix.usage (
    id                 bigserial   NOT NULL,
    session_id         text COLLATE "C" NOT NULL REFERENCES helix.sessions (session_id) ON DELETE CASCADE,
    run_id             text,
    step               integer,
    source_type        text        NOT NULL,
    source_name        text,
    input_tokens       integer     NOT NULL DEFAULT 0,
    output_tokens      integer     NOT NULL DEFAULT 0,
    cached_tokens      integer     NOT NULL DEFAULT 0,
    cache_write_tokens integer     NOT NULL DEFAULT 0,
    value              double precision,
    duration_ms        bigint,
    success            boolean     NOT NULL DEFAULT true,
    key                text        NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, key)
);

-- +goose StatementBegin
-- helix.checkpoint_usage expands a checkpoint's compact usage records.
CREATE FUNCTION helix.checkpoint_usage(sid text, rid text, step integer, recs json, created timestamptz)
RETURNS TABLE (session_id text, run_id text, step integer, source_type text, source_name text,
    input_tokens integer, output_tokens integer, cached_tokens integer, cache_write_tokens integer,
    value double precision, duration_ms bigint, success boolean, key text, created_at timestamptz, ord bigint)
LANGUAGE sql IMMUTABLE AS $$
    SELECT sid, x.r, x.p, u->>'t', u->>'n',
        COALESCE((u->>'i')::int, 0), COALESCE((u->>'o')::int, 0), COALESCE((u->>'c')::int, 0),
        COALESCE((u->>'w')::int, 0), (u->>'v')::float8, (u->>'d')::bigint, (u->>'e') IS NULL,
        COALESCE(u->>'K', replace(u->>'k', '~', ':' || COALESCE(x.r, '') || ':' || x.p)), created, e.ord
    FROM json_array_elements(recs) WITH ORDINALITY AS e(u, ord),
        LATERAL (SELECT COALESCE(u->>'r', rid) AS r, COALESCE((u->>'p')::int, step) AS p) AS x
$$;
-- +goose StatementEnd

-- usage_records: every usage record, usage's rows and the checkpoints'
-- records (a checkpoint's record whose key usage holds is left out).
CREATE VIEW helix.usage_records AS
    SELECT u.session_id, u.run_id, u.step, u.source_type, u.source_name, u.input_tokens, u.output_tokens,
        u.cached_tokens, u.cache_write_tokens, u.value, u.duration_ms, u.success, u.key, u.created_at,
        u.id AS seq_a, 0::bigint AS seq_b
    FROM helix.usage u
    UNION ALL
    SELECT u.session_id, u.run_id, u.step, u.source_type, u.source_name, u.input_tokens, u.output_tokens,
        u.cached_tokens, u.cache_write_tokens, u.value, u.duration_ms, u.success, u.key, u.created_at,
        c.created_seq AS seq_a, u.ord AS seq_b
    FROM helix.checkpoints c
    JOIN helix.sessions s ON s.key = c.session_key,
    LATERAL helix.checkpoint_usage(s.session_id, c.run_id, c.step_count, c.usage, c.created_at) u
    WHERE c.usage IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM helix.usage x WHERE x.session_id = u.session_id AND x.key = u.key);

-- step_journal: the engine's step journal rows (workflows/journal.go): a
-- row per helix.record_steps call, covering the records id … id + n - 1
-- (with n > 1, output is a JSON array of [name, started, completed, error,
-- output]); outputs are stored with their frequent keys coded
-- (helix.journal_output).
CREATE TABLE helix.step_journal (
    workflow_id  text    NOT NULL,
    id           integer NOT NULL,
    name         text    NOT NULL,
    output       text,
    error        text,
    started_at   bigint,
    completed_at bigint,
    n            integer NOT NULL DEFAULT 1,
    PRIMARY KEY (workflow_id, id)
);

-- +goose StatementBegin
-- helix.check_journal_owner fails with HX409 when the DBOS workflow wf is
-- no longer owned by the execution owner (it was taken over).
CREATE FUNCTION helix.check_journal_owner(wf text, owner text) RETURNS void LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    current_owner text;
BEGIN
    SELECT owner_xid INTO current_owner FROM dbos.workflow_status WHERE workflow_uuid = wf FOR NO KEY UPDATE;
    IF current_owner IS NULL OR current_owner <> owner THEN
        RAISE EXCEPTION 'workflow % is no longer owned by this execution', wf USING ERRCODE = 'HX409';
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.record_steps records steps of workflow wf for the execution owner
-- (HX409 once it no longer owns it): consecutive IDs share one row.
CREATE FUNCTION helix.record_steps(wf text, owner text, ids integer[], names text[], outputs text[], errs text[],
    started bigint[], completed bigint[]) RETURNS void LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    k integer := cardinality(ids);
    base bigint := coalesce(started[1], 0);
    packed text := '';
BEGIN
    PERFORM helix.check_journal_owner(wf, owner);
    IF k = 1 THEN
        INSERT INTO helix.step_journal (workflow_id, id, name, output, error, started_at, completed_at)
        VALUES (wf, ids[1], names[1], outputs[1], errs[1], started[1], completed[1]);
        RETURN;
    END IF;
    IF array_position(names, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'a step recorded for workflow % has no name', wf USING ERRCODE = 'not_null_violation';
    END IF;
    FOR i IN 1 .. k LOOP
        EXIT WHEN ids[i] IS DISTINCT FROM ids[1] + i - 1;
        packed := packed || ',[' || helix.journal_step_code(names[i])
            || ',' || coalesce((started[i] - base)::text, 'null') || ',' || coalesce((completed[i] - base)::text, 'null')
            || ',' || coalesce(to_json(errs[i])::text, 'null') || coalesce(',' || outputs[i]::json::text, '') || ']';
        IF i = k THEN
            INSERT INTO helix.step_journal (workflow_id, id, n, name, output, error, started_at, completed_at)
            VALUES (wf, ids[1], k, '', '[' || substr(packed, 2) || ']', NULL, started[1], completed[k]);
            RETURN;
        END IF;
    END LOOP;
    -- A run's row starts at its first ID only: a record given twice would
    -- overlap rows rather than fail on the primary key.
    IF (SELECT count(DISTINCT x) FROM unnest(ids) AS x) < k THEN
        RAISE EXCEPTION 'a step of workflow % is recorded twice', wf USING ERRCODE = 'unique_violation';
    END IF;
    INSERT INTO helix.step_journal (workflow_id, id, n, name, output, error, started_at, completed_at)
    SELECT wf, min(r.id), count(*),
           CASE count(*) WHEN 1 THEN min(r.name) ELSE '' END,
           CASE count(*) WHEN 1 THEN min(r.output)
               ELSE '[' || string_agg('[' || helix.journal_step_code(r.name)
                   || ',' || coalesce((r.s - r.base)::text, 'null') || ',' || coalesce((r.c - r.base)::text, 'null')
                   || ',' || coalesce(to_json(r.err)::text, 'null') || coalesce(',' || r.output::json::text, '') || ']',
                   ',' ORDER BY r.id) || ']' END,
           CASE count(*) WHEN 1 THEN min(r.err) END,
           (array_agg(r.s ORDER BY r.id))[1], (array_agg(r.c ORDER BY r.id DESC))[1]
    FROM (SELECT g.*, coalesce(first_value(g.s) OVER (PARTITION BY g.run ORDER BY g.id), 0) AS base
          FROM (SELECT u.*, u.id - row_number() OVER (ORDER BY u.id) AS run
                FROM unnest(ids, names, outputs, errs, started, completed) AS u(id, name, output, err, s, c)) g) r
    GROUP BY r.run;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.journal_output decodes a stored output's coded keys ("<a": …).
-- The table is workflows/journalcodec.go's: append only, never reorder.
CREATE FUNCTION helix.journal_output(stored text) RETURNS text LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    keys constant text[] := ARRAY[
        'result', 'type', 'content', 'toolCalls', 'id', 'name', 'arguments', 'stopReason',
        'usage', 'inputTokens', 'outputTokens', 'cachedTokens', 'cacheWriteTokens', 'durationMs', 'messageCount', 'toolCallId',
        'toolName', 'error', 'errorCode', 'checkpointId', 'failure', 'output', 'model', 'thinking',
        'patches', 'recorded', 'denied', 'finishWith', 'interrupted', 'continued', 'inbox', 'role',
        'agentType', 'turn', 'pending', 'kind', 'index', 'step', 'createdAt', 'deadlineAt'];
    codes constant text := 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';
    out text := stored;
BEGIN
    IF position('"<' IN stored) = 0 THEN
        RETURN stored;
    END IF;
    FOR i IN 1 .. cardinality(keys) LOOP
        out := replace(out, '"<' || substr(codes, i, 1) || '":', '"' || keys[i] || '":');
    END LOOP;
    RETURN out;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.journal_step_name names a checkpoint journal entry's step: an
-- engine step name is stored as its index in this table (workflows'
-- journalStepNames: append only, never reorder), any other as a string.
CREATE FUNCTION helix.journal_step_name(n json) RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE json_typeof(n)
        WHEN 'number' THEN (ARRAY['helix.run_tool', 'helix.commit_step', 'helix.call_model', 'helix.fire_hooks',
            'helix.begin_run', 'helix.end_run', 'helix.approval_gate', 'helix.suspend_step',
            'helix.resolve_tool_call', 'helix.save_suspended_step', 'helix.dispatch_subagent',
            'helix.interrupt_for_children', 'helix.resume_child', 'helix.save_child_wait',
            'helix.companion', 'helix.companion_cancel', 'helix.companion_wait_ended',
            'helix.deliver_completions', 'helix.segment_status'])[(n::text)::integer + 1]
        ELSE n #>> '{}' END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.journal_step_code is the JSON a packed step journal entry stores
-- a step's name as: helix.journal_step_name's number for the engine's
-- names, the name's JSON string for any other (workflows.codeStepName).
CREATE FUNCTION helix.journal_step_code(name text) RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce((array_position(ARRAY['helix.run_tool', 'helix.commit_step', 'helix.call_model', 'helix.fire_hooks',
            'helix.begin_run', 'helix.end_run', 'helix.approval_gate', 'helix.suspend_step',
            'helix.resolve_tool_call', 'helix.save_suspended_step', 'helix.dispatch_subagent',
            'helix.interrupt_for_children', 'helix.resume_child', 'helix.save_child_wait',
            'helix.companion', 'helix.companion_cancel', 'helix.companion_wait_ended',
            'helix.deliver_completions', 'helix.segment_status'], name) - 1)::text, to_json(name)::text)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.journal_workflow is the DBOS workflow ID of a run's segment.
CREATE FUNCTION helix.journal_workflow(run_wf text, seg integer) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE seg WHEN 0 THEN run_wf ELSE run_wf || '-seg-' || seg END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.checkpoint_journal expands a checkpoint's journal
-- [seg, first ID, base time, entry …] into records; an entry is [name,
-- started, completed, error(, output)] or, for a commit whose output is
-- the message count alone, [started, completed] (mc: the checkpoint's
-- message_count). A commit's output gets the checkpoint's ID back.
CREATE FUNCTION helix.checkpoint_journal(cp text, j text, mc integer)
RETURNS TABLE (seg integer, id integer, name text, output text, error text, started_at bigint, completed_at bigint)
LANGUAGE sql IMMUTABLE AS $$
    SELECT (j::json->>0)::integer, (j::json->>1)::integer + e.i::integer - 4, x.name,
           CASE WHEN x.name = 'helix.commit_step' AND json_array_length(x.r) = 5
                     AND json_typeof(x.r->4) = 'object'
                THEN '{"<t":' || to_json(cp)::text
                     || CASE WHEN (x.r->4)::text = '{}' THEN '}' ELSE ',' || substr((x.r->4)::text, 2) END
                WHEN json_array_length(x.r) = 5 THEN (x.r->4)::text END,
           x.r->>3, (j::json->>2)::bigint + (x.r->>1)::bigint, (j::json->>2)::bigint + (x.r->>2)::bigint
    FROM json_array_elements(j::json) WITH ORDINALITY AS e(r, i),
        LATERAL (SELECT CASE WHEN json_typeof(e.r) <> 'array' THEN e.r WHEN json_array_length(e.r) = 2
                    THEN ('["helix.commit_step",' || (e.r->0)::text || ',' || (e.r->1)::text || ',null,'
                          || COALESCE('{"<o":' || mc || '}', 'null') || ']')::json
                    ELSE e.r END AS r) s,
        LATERAL (SELECT helix.journal_step_name(s.r->0) AS name, s.r) x
    WHERE e.i > 3
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.message_record renders the model call's record a pending or
-- committed assistant row holds (messages.meta) as the step's output.
CREATE FUNCTION helix.message_record(seq integer, message jsonb, meta json) RETURNS text LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT replace(json_build_object(
        'result', (SELECT json_object_agg(f.k, f.v ORDER BY f.o) FROM (VALUES
            (1, 'type', CASE WHEN coalesce(json_typeof(meta->6), 'null') = 'null' THEN '"tool_calls"'::json ELSE meta->6 END),
            (2, 'content', (message->'content')::json),
            (3, 'thinking', (message->'thinking')::json),
            (4, 'toolCalls', (message->'toolCalls')::json),
            (5, 'output', meta->13),
            (6, 'error', meta->14),
            (7, 'errorCode', meta->15),
            (8, 'stopReason', meta->7),
            (9, 'usage', json_build_object(
                'inputTokens', coalesce((meta->>8)::integer, 0), 'outputTokens', coalesce((meta->>9)::integer, 0),
                'cachedTokens', coalesce((meta->>10)::integer, 0), 'cacheWriteTokens', coalesce((meta->>11)::integer, 0))),
            (10, 'model', meta->12)) AS f(o, k, v)
            WHERE f.v IS NOT NULL AND json_typeof(f.v) <> 'null'),
        'durationMs', coalesce((meta->>5)::bigint, 0),
        'messageCount', seq)::text, '"<', '"\u003c')
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.message_journal is the step journal record of a model call's row.
CREATE FUNCTION helix.message_journal(sess text, at_seq integer, message jsonb, meta json)
RETURNS TABLE (workflow_id text, id integer, name text, output text, error text, started_at bigint, completed_at bigint)
LANGUAGE sql STABLE STRICT AS $$
    SELECT helix.journal_workflow(r.workflow_id, (meta->>1)::integer), 1000000 + (meta->>2)::integer,
           'helix.call_model', helix.message_record(at_seq, message, meta), NULL::text,
           (meta->>3)::bigint, (meta->>3)::bigint + (meta->>4)::bigint
    FROM helix.runs r WHERE r.session_id = sess AND r.turn = (meta->>0)::integer AND r.workflow_id IS NOT NULL
$$;
-- +goose StatementEnd

-- step_journal_row_records: step_journal's rows, one row per record.
CREATE VIEW helix.step_journal_row_records AS
    SELECT j.workflow_id, j.id, j.name, helix.journal_output(j.output) AS output, j.error, j.started_at, j.completed_at
    FROM helix.step_journal j WHERE j.n = 1
    UNION ALL
    SELECT j.workflow_id, j.id + e.i::integer - 1, helix.journal_step_name(e.r->0),
        helix.journal_output(CASE json_array_length(e.r) WHEN 5 THEN (e.r->4)::text END),
        e.r->>3, COALESCE(j.started_at, 0) + (e.r->>1)::bigint, COALESCE(j.started_at, 0) + (e.r->>2)::bigint
    FROM helix.step_journal j, LATERAL json_array_elements(j.output::json) WITH ORDINALITY AS e(r, i)
    WHERE j.n > 1;

-- step_journal_records: every step journal record, one row each, from the
-- three places a record lives: step_journal's rows, the checkpoints'
-- journals and the model calls' message rows.
CREATE VIEW helix.step_journal_records AS
    SELECT * FROM helix.step_journal_row_records
    UNION ALL
    SELECT helix.journal_workflow(r.workflow_id, x.seg), x.id, x.name, helix.journal_output(x.output), x.error,
        x.started_at, x.completed_at
    FROM helix.checkpoints c
    JOIN helix.sessions s ON s.key = c.session_key
    JOIN helix.runs r ON r.run_id = c.run_id,
    LATERAL helix.checkpoint_journal(helix.checkpoint_id_of(s.session_id, c.step_count, c.id_ms, c.id_rand),
        c.journal, c.message_count) x
    WHERE c.journal IS NOT NULL
    UNION ALL
    SELECT x.workflow_id, x.id, x.name, x.output, x.error, x.started_at, x.completed_at
    FROM helix.messages m
    JOIN helix.sessions s ON s.key = m.session_key,
    LATERAL helix.message_journal(s.session_id, m.seq, m.message, m.meta) x
    WHERE m.meta IS NOT NULL;

-- +goose StatementBegin
-- helix.evict_pending_messages moves the pending model rows of session
-- sess at seq >= from_seq (but the one at from_seq holding keep) to
-- step_journal, before a writer takes their seqs. It looks first, so the
-- common case (nothing pending) plans no delete.
CREATE FUNCTION helix.evict_pending_messages(sess text, from_seq integer, keep jsonb DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    n integer;
    sess_key bigint;
BEGIN
    SELECT s.key INTO sess_key FROM helix.sessions s WHERE s.session_id = sess;
    PERFORM FROM helix.messages m WHERE m.session_key = sess_key AND m.seq >= from_seq
        AND NOT (keep IS NOT NULL AND m.seq = from_seq AND m.message = keep) LIMIT 1;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    WITH gone AS (
        DELETE FROM helix.messages m
        WHERE m.session_key = sess_key AND m.seq >= from_seq
          AND NOT (keep IS NOT NULL AND m.seq = from_seq AND m.message = keep)
        RETURNING m.seq, m.message, m.meta
    ), moved AS (
        INSERT INTO helix.step_journal (workflow_id, id, name, output, error, started_at, completed_at)
        SELECT x.* FROM gone g, helix.message_journal(sess, g.seq, g.message, g.meta) x
        ON CONFLICT (workflow_id, id) DO NOTHING
    )
    SELECT count(*) INTO n FROM gone;
    RETURN n;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.record_model_message writes a model call's record as the step's
-- assistant row at at_seq when the session's count is still at_seq and no
-- row is there (returning the row's tool calls), the other records through
-- helix.record_steps; otherwise every record through helix.record_steps.
CREATE FUNCTION helix.record_model_message(wf text, owner text, ids integer[], names text[], outputs text[],
    errs text[], started bigint[], completed bigint[], sess text, at_seq integer, row_message jsonb, row_meta json)
RETURNS text LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    k integer := cardinality(ids);
    calls text;
    sess_key bigint;
BEGIN
    SELECT s.key INTO sess_key FROM helix.sessions s WHERE s.session_id = sess AND s.message_count = at_seq FOR NO KEY UPDATE;
    IF FOUND THEN
        PERFORM FROM helix.messages m WHERE m.session_key = sess_key AND m.seq = at_seq;
        IF NOT FOUND THEN
            PERFORM helix.check_journal_owner(wf, owner);
            INSERT INTO helix.messages AS m (session_key, seq, message, meta) VALUES (sess_key, at_seq, row_message, row_meta)
            RETURNING coalesce((m.message->'toolCalls')::text, 'null') INTO calls;
            IF k > 1 THEN
                PERFORM helix.record_steps(wf, owner, ids[1:k-1], names[1:k-1], outputs[1:k-1], errs[1:k-1],
                                           started[1:k-1], completed[1:k-1]);
            END IF;
            RETURN calls;
        END IF;
    END IF;
    PERFORM helix.record_steps(wf, owner, ids, names, outputs, errs, started, completed);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.earlier_turn_checkpoint is the newest checkpoint of the session's
-- earlier turns (before own_turn): where a run's own records start.
CREATE FUNCTION helix.earlier_turn_checkpoint(sess text, sess_key bigint, own_turn integer)
RETURNS TABLE (created_seq bigint, message_count integer) LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    earlier text[] := ARRAY(SELECT r.run_id FROM helix.runs r WHERE r.session_id = sess AND r.turn < own_turn);
BEGIN
    IF cardinality(earlier) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT cp.created_seq, cp.message_count FROM helix.checkpoints cp
        JOIN unnest(earlier) AS e(run_id) ON e.run_id = cp.run_id
        WHERE cp.session_key = sess_key
        ORDER BY cp.created_seq DESC LIMIT 1;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.run_journals returns the journals of run's segment seg, newest first.
CREATE FUNCTION helix.run_journals(sess text, run text, seg integer)
RETURNS TABLE (checkpoint_id text, journal text, message_count integer) LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    own_turn integer;
    sess_key bigint;
    bound bigint;
BEGIN
    SELECT r.turn INTO own_turn FROM helix.runs r WHERE r.run_id = run;
    IF own_turn IS NULL THEN
        RETURN;
    END IF;
    SELECT s.key INTO sess_key FROM helix.sessions s WHERE s.session_id = sess;
    SELECT e.created_seq INTO bound FROM helix.earlier_turn_checkpoint(sess, sess_key, own_turn) e;
    RETURN QUERY SELECT helix.checkpoint_id_of(sess, cp.step_count, cp.id_ms, cp.id_rand), cp.journal, cp.message_count
        FROM helix.checkpoints cp
        WHERE cp.session_key = sess_key AND cp.run_id = run AND cp.created_seq > COALESCE(bound, 0)
          AND split_part(substr(cp.journal, 2), ',', 1) = seg::text
        ORDER BY cp.created_seq DESC;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.run_model_messages returns the model-call rows of run's segment seg.
CREATE FUNCTION helix.run_model_messages(sess text, run text, seg integer)
RETURNS TABLE (seq integer, message text, meta text) LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    own_turn integer;
    bound integer;
    sess_key bigint;
BEGIN
    SELECT r.turn INTO own_turn FROM helix.runs r WHERE r.run_id = run;
    IF own_turn IS NULL THEN
        RETURN;
    END IF;
    SELECT s.key INTO sess_key FROM helix.sessions s WHERE s.session_id = sess;
    SELECT e.message_count INTO bound FROM helix.earlier_turn_checkpoint(sess, sess_key, own_turn) e;
    RETURN QUERY SELECT m.seq, m.message::text, m.meta::text FROM helix.messages m
        WHERE m.session_key = sess_key AND m.seq >= COALESCE(bound, 0) AND m.meta IS NOT NULL
          AND (m.meta->>0)::integer = own_turn AND (m.meta->>1)::integer = seg
        ORDER BY m.seq;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.refuse_step_commit fails a held step commit whose assumptions no
-- longer hold (store/postgres's commitStepSQL) with HX412.
CREATE FUNCTION helix.refuse_step_commit(session text) RETURNS bigint LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    RAISE EXCEPTION 'the commit of a step of session % assumed a state that no longer holds (an interrupt, another writer, an ended session or stream): it wrote nothing', session
        USING ERRCODE = 'HX412', HINT = 'the engine commits the step again under the session''s locks';
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.send_tool_message sends a DBOS message to workflow dest inside the
-- caller's transaction (HX404: no such workflow; HX410: cancelled) and
-- returns the announcement of the hibernated run it woke (helix.wake_run),
-- NULL when it woke none. A hibernated run that is not queued gets no
-- message, only the wake: its continuation reads the answer from the
-- session's pending call, recorded in the same transaction (a live wait
-- is woken by DBOS's trigger on the message, a hibernated queued driver
-- takes the message); a message would make the transaction notify
-- (DBOS's trigger), which an answer to a hibernated run need not do. With
-- announce false the wake is not announced in the transaction: the caller
-- announces the returned announcement after its commit (helix.wake_run,
-- which also writes the return to running of run answered, when given).
CREATE FUNCTION helix.send_tool_message(dest text, msg_topic text, msg text, msg_uuid text, announce boolean DEFAULT true,
    answered text DEFAULT NULL) RETURNS text
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    wf_status text;
    asleep boolean;
    woke text;
BEGIN
    SELECT status INTO wf_status FROM dbos.workflow_status WHERE workflow_uuid = dest;
    IF wf_status IS NULL THEN
        RAISE EXCEPTION 'workflow % does not exist (deleted from DBOS''s tables?): no run can take a message sent to it', dest
            USING ERRCODE = 'HX404';
    END IF;
    IF wf_status = 'CANCELLED' THEN
        RAISE EXCEPTION 'workflow % was cancelled: nothing will take a message sent to it', dest USING ERRCODE = 'HX410';
    END IF;
    -- A hibernated run that is not queued gets its wake only, whose update
    -- locks its row: the common case, tried first. Otherwise the row is
    -- locked before the decision, as helix.wake_run locks it: a
    -- hibernation that locks the row after this transaction sees the
    -- message (and does not hibernate).
    woke := helix.wake_run(dest, announce, answered, true);
    IF woke IS NOT NULL THEN
        RETURN woke;
    END IF;
    SELECT r.hibernated_at IS NOT NULL AND r.queue IS NULL AND r.status NOT IN ('completed', 'failed', 'interrupted')
    INTO asleep FROM helix.runs r WHERE r.workflow_id = dest FOR NO KEY UPDATE;
    IF NOT coalesce(asleep, false) THEN
        INSERT INTO dbos.notifications (destination_uuid, topic, message, serialization, message_uuid, created_at_epoch_ms)
        VALUES (dest, msg_topic, msg, 'DBOS_JSON', msg_uuid, (EXTRACT(EPOCH FROM now()) * 1000)::bigint)
        ON CONFLICT (message_uuid) DO NOTHING;
    END IF;
    RETURN helix.wake_run(dest, announce, answered);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The run and the step a suspended step ID ("{runId}:{step}", the step 1
-- to 9 digits) names, as {"runId", "step"}; {} for an ID of another form.
-- store/postgres/pending_codec.go's stepIDParts reads it the same way.
-- One expression (the planner inlines it), the last colon's place from
-- the end spelled out each time.
CREATE FUNCTION helix.step_id_parts(step_id text) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN strpos(reverse(step_id), ':') BETWEEN 2 AND 10 AND length(step_id) > strpos(reverse(step_id), ':')
            AND ltrim(right(step_id, strpos(reverse(step_id), ':') - 1), '0123456789') = ''
        THEN jsonb_build_object('runId', left(step_id, -strpos(reverse(step_id), ':')),
            'step', right(step_id, strpos(reverse(step_id), ':') - 1)::integer)
        ELSE '{}' END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A pending call as a row of helix.sessions keeps it, with the run and the
-- step its row's suspended step ID (step_id, "{runId}:{step}") implies: the
-- store leaves them out of the call when they are the ID's
-- (store/postgres/pending_codec.go, which reads the ID the same way).
-- One expression, so that the planner inlines it (a function with a FROM
-- clause is planned again at each call), and no regular expression (a
-- backend caches 32 compiled ones: more, and they compile again).
CREATE FUNCTION helix.pending_call(call jsonb, step_id text) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN call IS NULL OR call ? 'runId' OR step_id IS NULL THEN call
        ELSE call || helix.step_id_parts(step_id) END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A row's pending calls with what its suspended step ID old_id implies
-- spelled out, for a statement that changes the ID to new_id.
CREATE FUNCTION helix.pending_restated(pending jsonb, old_id text, new_id text) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN pending = '{}' OR old_id IS NOT DISTINCT FROM new_id THEN pending
        ELSE (SELECT jsonb_object_agg(p.key, helix.pending_call(p.value, old_id)) FROM jsonb_each(pending) p) END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- helix.submit_answer records the answer sub (a helix.ToolSubmission's
-- JSON, of kind sub_kind, given at now_ms, Unix ms; has_result: it carries
-- a client tool's result) to tool call call_id of root session root_id and
-- sends its message to the waiting run
-- (helix.send_tool_message, the wake not announced: the caller announces
-- woke after its commit), in one statement: postgres.Store.SubmitAnswer,
-- the common path of an answer. It applies only where the answer needs no
-- check this function does not make: a root session that is active and
-- routes every waiting call of its conversation to itself (no sub-agent
-- waits), the call waiting there unanswered, of the answer's kind, with no
-- output schema to validate a result against, and a run's workflow to send
-- to. Otherwise applied is false and nothing was written: the caller then
-- records the answer as RecordSubmission does, which reports every refusal.
-- The writes are RecordSubmission's (TestSubmitAnswerWritesWhatRecordSubmissionWrites).
CREATE FUNCTION helix.submit_answer(root_id text, call_id text, sub_kind text, has_result boolean, sub jsonb, now_ms bigint,
    usage_source text, msg_topic text, msg text, msg_key text,
    OUT applied boolean, OUT call jsonb, OUT remaining text[], OUT woke text)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    pending jsonb;
    step_id text;
    implied jsonb;
BEGIN
    applied := false;
    -- One update, which locks the row (a concurrent answer to the call
    -- finds it answered when its update reads the row again).
    UPDATE helix.sessions s SET
        pending_client_tool_calls = jsonb_set(s.pending_client_tool_calls, ARRAY[call_id], s.pending_client_tool_calls -> call_id
            || jsonb_build_object('submission', sub, 'submittedAt', now_ms, 'sentTo', s.pending_client_tool_calls -> call_id -> 'workflowId')),
        completed_client_tool_calls = s.completed_client_tool_calls || jsonb_build_object(call_id, now_ms),
        version = s.version + 1, updated_at = now()
    WHERE s.session_id = root_id AND s.parent_session_id IS NULL AND s.status = 'active'
      AND s.suspended_awaiting_children = '{}' AND NOT s.completed_client_tool_calls ? call_id
      -- The root owns the call: its map names it, or (the map keeps no
      -- entry a row's own pending call implies) the call waits in its row.
      AND CASE WHEN s.client_tool_call_ownership ? call_id THEN s.client_tool_call_ownership ->> call_id = root_id
          ELSE s.pending_client_tool_calls ? call_id END
      AND NOT EXISTS (SELECT 1 FROM jsonb_each_text(s.client_tool_call_ownership) o WHERE o.value <> root_id)
      AND NOT s.pending_client_tool_calls -> call_id ?| ARRAY['submission', 'timedOutAt']
      AND s.pending_client_tool_calls -> call_id ->> 'kind' = sub_kind
      AND coalesce(s.pending_client_tool_calls -> call_id ->> 'workflowId', '') <> ''
      AND NOT (has_result AND s.pending_client_tool_calls -> call_id ? 'outputSchema')
    RETURNING s.pending_client_tool_calls, s.suspended_step_id INTO pending, step_id;
    IF pending IS NULL THEN
        RETURN;
    END IF;
    -- The run and step the row's suspended step ID implies, read once for
    -- the calls that leave them out (as helix.pending_call reads them).
    implied := helix.step_id_parts(step_id);
    call := pending -> call_id;
    IF NOT call ? 'runId' THEN
        call := call || implied;
    END IF;
    INSERT INTO helix.usage (session_id, run_id, step, source_type, source_name, value, success, key)
    VALUES (root_id, nullif(call ->> 'runId', ''), coalesce((call ->> 'step')::integer, 0), usage_source,
        nullif(call ->> 'toolName', ''), (now_ms - coalesce((call ->> 'createdAt')::bigint, 0))::double precision, true,
        'client_tool_wait:' || call_id)
    ON CONFLICT (session_id, key) DO NOTHING;
    SELECT coalesce(array_agg(p.key ORDER BY coalesce((p.at ->> 'step')::integer, 0), coalesce((p.value ->> 'index')::integer, 0),
            coalesce(p.value ->> 'toolCallId', p.key)), '{}')
    INTO remaining FROM jsonb_each(pending) e,
        LATERAL (SELECT e.key, e.value, CASE WHEN e.value ? 'runId' THEN e.value ELSE implied END AS at) p
    WHERE coalesce(p.at ->> 'runId', '') = coalesce(call ->> 'runId', '')
      AND NOT p.value ? 'submission' AND NOT p.value ? 'timedOutAt';
    -- The run's return to running, once none of its calls waits, is
    -- written with its wake (helix.wake_run).
    woke := helix.send_tool_message(call ->> 'workflowId', msg_topic, msg, msg_key || '::' || (call ->> 'workflowId'), false,
        CASE WHEN cardinality(remaining) = 0 THEN call ->> 'runId' END);
    applied := true;
END
$$;
-- +goose StatementEnd

-- executors: every launched engine's liveness record (docs/storage.md).
-- format_level: the storage format level the engine reads; a process that
-- claims the row (started_at changes) writes it in its next statement, and
-- the trigger clears it meanwhile.
CREATE TABLE helix.executors (
    executor_id         text        PRIMARY KEY,
    application_version text        NOT NULL,
    hostname            text,
    pid                 integer,
    started_at          timestamptz NOT NULL DEFAULT now(),
    heartbeat_at        timestamptz NOT NULL DEFAULT now(),
    app_name            text,
    pid_namespace       text,
    lease_ms            bigint      NOT NULL DEFAULT 30000,
    stopped_at          timestamptz,
    taken_over_by       text,
    taken_over_at       timestamptz,
    recovered_at        timestamptz,
    recovered_workflows integer,
    recovery_error      text,
    format_level        smallint
);

-- +goose StatementBegin
CREATE FUNCTION helix.executors_format_level_reset() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.format_level := NULL;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER executors_format_level_reset BEFORE UPDATE ON helix.executors
    FOR EACH ROW WHEN (NEW.started_at IS DISTINCT FROM OLD.started_at) EXECUTE FUNCTION helix.executors_format_level_reset();

-- +goose Down
DROP TABLE helix.executors;
DROP FUNCTION helix.executors_format_level_reset();
DROP FUNCTION helix.submit_answer(text, text, text, boolean, jsonb, bigint, text, text, text, text);
DROP FUNCTION helix.pending_restated(jsonb, text, text);
DROP FUNCTION helix.pending_call(jsonb, text);
DROP FUNCTION helix.step_id_parts(text);
DROP FUNCTION helix.send_tool_message(text, text, text, text, boolean, text);
DROP FUNCTION helix.wake_run(text, boolean, text, boolean);
DROP FUNCTION helix.announce_pending();
DROP FUNCTION helix.announce(text, text);
DROP FUNCTION helix.announces_after_commit();
DROP FUNCTION helix.run_workflow_ids(text);
DROP FUNCTION helix.current_workflow_id(text, integer);
DROP FUNCTION helix.wake_workflow_id(text, integer);
DROP FUNCTION helix.refuse_step_commit(text);
DROP FUNCTION helix.run_model_messages(text, text, integer);
DROP FUNCTION helix.run_journals(text, text, integer);
DROP FUNCTION helix.earlier_turn_checkpoint(text, bigint, integer);
DROP FUNCTION helix.record_model_message(text, text, integer[], text[], text[], text[], bigint[], bigint[], text, integer, jsonb, json);
DROP FUNCTION helix.evict_pending_messages(text, integer, jsonb);
DROP VIEW helix.step_journal_records;
DROP VIEW helix.step_journal_row_records;
DROP FUNCTION helix.message_journal(text, integer, jsonb, json);
DROP FUNCTION helix.message_record(integer, jsonb, json);
DROP FUNCTION helix.checkpoint_journal(text, text, integer);
DROP FUNCTION helix.journal_workflow(text, integer);
DROP FUNCTION helix.journal_step_code(text);
DROP FUNCTION helix.journal_step_name(json);
DROP FUNCTION helix.journal_output(text);
DROP FUNCTION helix.record_steps(text, text, integer[], text[], text[], text[], bigint[], bigint[]);
DROP FUNCTION helix.check_journal_owner(text, text);
DROP TABLE helix.step_journal;
DROP VIEW helix.usage_records;
DROP FUNCTION helix.checkpoint_usage(text, text, integer, json, timestamptz);
DROP TABLE helix.usage;
DROP TABLE helix.stream_write_batches;
DROP TABLE helix.stream_truncations;
DROP TABLE helix.stream_chunks;
DROP TABLE helix.streams;
DROP FUNCTION helix.delete_stream_rows();
DROP TABLE helix.staging;
DROP TABLE helix.inbox;
DROP TABLE helix.sub_session_refs;
DROP TABLE helix.checkpoints;
DROP SEQUENCE helix.checkpoint_seq;
DROP FUNCTION helix.checkpoint_id_parts(text, text);
DROP FUNCTION helix.checkpoint_id_of(text, integer, bigint, text);
DROP TABLE helix.runs;
DROP FUNCTION helix.notify_run_status();
DROP TABLE helix.messages;
DROP TABLE helix.sessions;
DROP FUNCTION helix.delete_session_rows();
DROP FUNCTION helix.sessions_mode_write_once();
DROP SEQUENCE helix.session_keys;
