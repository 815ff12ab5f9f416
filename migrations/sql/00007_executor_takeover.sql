-- +goose Up
-- Cluster takeover (engine/takeover.go). Each row keeps its own lease, so a
-- replica judges a peer by the lease that peer promised; a clean shutdown
-- marks its row stopped (its sessions are taken over at once) instead of
-- deleting it; a takeover is recorded on the dead executor's row and kept
-- for the operator (`helix-dbos doctor`).
ALTER TABLE helix.executors
    ADD COLUMN app_name            text,
    ADD COLUMN pid_namespace       text,
    ADD COLUMN lease_ms            bigint      NOT NULL DEFAULT 30000,
    ADD COLUMN stopped_at          timestamptz,
    ADD COLUMN taken_over_by       text,
    ADD COLUMN taken_over_at       timestamptz,
    ADD COLUMN recovered_at        timestamptz,
    ADD COLUMN recovered_workflows integer,
    ADD COLUMN recovery_error      text;

-- +goose Down
ALTER TABLE helix.executors
    DROP COLUMN recovery_error,
    DROP COLUMN recovered_workflows,
    DROP COLUMN recovered_at,
    DROP COLUMN taken_over_at,
    DROP COLUMN taken_over_by,
    DROP COLUMN stopped_at,
    DROP COLUMN lease_ms,
    DROP COLUMN pid_namespace,
    DROP COLUMN app_name;
