-- +goose Up
-- inbox: messages sent to a running persistent companion
-- (companion__sendMessage). The companion's per-step commit reads them in
-- the transaction that checks whether it finishes, so a message is never
-- lost to a companion finishing at the same moment, and is read once.
CREATE TABLE helix.inbox (
    session_id  text        NOT NULL REFERENCES helix.sessions (session_id) ON DELETE CASCADE,
    message_id  text        NOT NULL, -- idempotency key: the sending tool call
    message     jsonb       NOT NULL,
    seq         bigserial,
    consumed_at timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, message_id)
);
CREATE INDEX inbox_unconsumed_idx ON helix.inbox (session_id, seq) WHERE consumed_at IS NULL;

-- +goose Down
DROP TABLE helix.inbox;
