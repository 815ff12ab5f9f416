-- +goose Up
-- The helix schema itself is created by migrations.Up before goose runs, so
-- that goose's version table can live inside it.

-- sessions: one row per session (conversation); session_id keys everything.
CREATE TABLE helix.sessions (
    session_id                  text        PRIMARY KEY,
    agent_type                  text        NOT NULL,
    stream_id                   text        NOT NULL,
    parent_session_id           text,
    root_session_id             text        NOT NULL,
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
    updated_at                  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sessions_parent_idx ON helix.sessions (parent_session_id) WHERE parent_session_id IS NOT NULL;
CREATE INDEX sessions_root_idx ON helix.sessions (root_session_id);
CREATE INDEX sessions_status_updated_idx ON helix.sessions (status, updated_at);
CREATE INDEX sessions_user_idx ON helix.sessions (user_id) WHERE user_id IS NOT NULL;
CREATE INDEX sessions_expires_idx ON helix.sessions (expires_at) WHERE expires_at IS NOT NULL;

-- mode is write-once: once bound to standard or persistent it never changes.
-- +goose StatementBegin
CREATE FUNCTION helix.sessions_mode_write_once() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.mode IS NOT NULL AND NEW.mode IS DISTINCT FROM OLD.mode THEN
        RAISE EXCEPTION 'helix: session % mode is write-once (is %, refused %)', OLD.session_id, OLD.mode, NEW.mode
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER sessions_mode_write_once BEFORE UPDATE OF mode ON helix.sessions
    FOR EACH ROW EXECUTE FUNCTION helix.sessions_mode_write_once();

-- messages: the append-only conversation log. seq is the 0-based index.
CREATE TABLE helix.messages (
    session_id text        NOT NULL REFERENCES helix.sessions (session_id) ON DELETE CASCADE,
    seq        integer     NOT NULL,
    message    jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, seq)
);

-- runs: one row per execution (turn, resume, retry) of a session.
CREATE TABLE helix.runs (
    run_id          text        PRIMARY KEY,
    session_id      text        NOT NULL REFERENCES helix.sessions (session_id) ON DELETE CASCADE,
    turn            integer     NOT NULL,
    status          text        NOT NULL
        CHECK (status IN ('running', 'completed', 'failed', 'interrupted',
                          'suspended_client_tool', 'suspended_awaiting_children', 'suspended_step_partial')),
    step_count      integer     NOT NULL DEFAULT 0,
    start_sequence  bigint      NOT NULL DEFAULT 0,
    workflow_id     text,
    previous_run_id text,
    error           text,
    started_at      timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (session_id, turn)
);

-- checkpoints point into the message log (message_count) instead of copying it.
CREATE TABLE helix.checkpoints (
    checkpoint_id   text        PRIMARY KEY,
    session_id      text        NOT NULL REFERENCES helix.sessions (session_id) ON DELETE CASCADE,
    run_id          text,
    step_count      integer     NOT NULL,
    message_count   integer     NOT NULL,
    stream_sequence bigint,
    status          text        NOT NULL,
    custom_state    jsonb       NOT NULL,
    output          jsonb,
    created_seq     bigserial,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX checkpoints_session_idx ON helix.checkpoints (session_id, created_seq);

-- sub_session_refs: a parent's record of its sub-agent sessions.
CREATE TABLE helix.sub_session_refs (
    session_id           text        NOT NULL REFERENCES helix.sessions (session_id) ON DELETE CASCADE,
    sub_session_id       text        NOT NULL,
    agent_type           text        NOT NULL,
    parent_tool_call_id  text        NOT NULL,
    status               text        NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'completed', 'failed')),
    mode                 text        NOT NULL DEFAULT 'ephemeral' CHECK (mode IN ('ephemeral', 'persistent')),
    name                 text,
    completion_delivered boolean     NOT NULL DEFAULT false,
    started_at           timestamptz NOT NULL DEFAULT now(),
    completed_at         timestamptz,
    updated_at           timestamptz NOT NULL DEFAULT now(),
    created_seq          bigserial,
    PRIMARY KEY (session_id, sub_session_id)
);

-- staging: custom-state patches staged by parallel tools of one step,
-- promoted atomically at the step's commit.
CREATE TABLE helix.staging (
    session_id text        NOT NULL REFERENCES helix.sessions (session_id) ON DELETE CASCADE,
    step_id    text        NOT NULL,
    change_id  text        NOT NULL,
    patches    jsonb       NOT NULL,
    staged_seq bigserial,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, step_id, change_id)
);

-- streams: one ordered event stream per root session (sub-agents write into
-- their root's stream). owner_session_id ties its lifetime to that session.
CREATE TABLE helix.streams (
    stream_id        text        PRIMARY KEY,
    owner_session_id text        REFERENCES helix.sessions (session_id) ON DELETE CASCADE,
    status           text        NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'paused', 'ended', 'failed')),
    latest_seq       bigint      NOT NULL DEFAULT 0,
    truncation_epoch integer     NOT NULL DEFAULT 0,
    final_output     jsonb,
    error            text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX streams_owner_idx ON helix.streams (owner_session_id) WHERE owner_session_id IS NOT NULL;

CREATE TABLE helix.stream_chunks (
    stream_id  text        NOT NULL REFERENCES helix.streams (stream_id) ON DELETE CASCADE,
    seq        bigint      NOT NULL,
    run_id     text,
    step       integer     NOT NULL DEFAULT 0,
    attempt    integer     NOT NULL DEFAULT 0,
    chunk      json        NOT NULL, -- json, not jsonb: stored and served byte for byte
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stream_id, seq)
);

-- stream_truncations: one row per cleanup, so a reader attached before a
-- cleanup can tell whether chunks it had not read yet were removed.
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

-- stream_write_batches: the idempotency tokens of batched chunk writes. A
-- batch whose commit acknowledgement was lost is looked up here before it is
-- retried, so no chunk is written twice. Rows older than an hour are pruned.
CREATE TABLE helix.stream_write_batches (
    batch_id   uuid        PRIMARY KEY,
    streams    text[]      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- usage: per model call, per tool call and client-tool wait rows. key makes
-- a replayed record idempotent.
CREATE TABLE helix.usage (
    id                 bigserial   PRIMARY KEY,
    session_id         text        NOT NULL REFERENCES helix.sessions (session_id) ON DELETE CASCADE,
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
    UNIQUE (session_id, key)
);
CREATE INDEX usage_source_idx ON helix.usage (source_type, source_name);

-- executors: cluster liveness (heartbeats) of engine processes.
CREATE TABLE helix.executors (
    executor_id         text        PRIMARY KEY,
    application_version text        NOT NULL,
    hostname            text,
    pid                 integer,
    started_at          timestamptz NOT NULL DEFAULT now(),
    heartbeat_at        timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE helix.executors;
DROP TABLE helix.usage;
DROP TABLE helix.stream_write_batches;
DROP TABLE helix.stream_truncations;
DROP TABLE helix.stream_chunks;
DROP TABLE helix.streams;
DROP TABLE helix.staging;
DROP TABLE helix.sub_session_refs;
DROP TABLE helix.checkpoints;
DROP TABLE helix.runs;
DROP TABLE helix.messages;
DROP TABLE helix.sessions;
DROP FUNCTION helix.sessions_mode_write_once();
