-- +goose Up
-- sub_session_refs.status gains the statuses of the specification's
-- SubSessionRef: interrupted (the child's run stopped on an interrupt),
-- terminated (companion__terminateChild) and paused_awaiting_client (the
-- child waits for a client tool result or an approval).
ALTER TABLE helix.sub_session_refs DROP CONSTRAINT sub_session_refs_status_check;
ALTER TABLE helix.sub_session_refs ADD CONSTRAINT sub_session_refs_status_check
    CHECK (status IN ('running', 'completed', 'failed', 'interrupted', 'terminated', 'paused_awaiting_client'));

-- +goose Down
UPDATE helix.sub_session_refs SET status = 'failed' WHERE status IN ('interrupted', 'terminated');
UPDATE helix.sub_session_refs SET status = 'running' WHERE status = 'paused_awaiting_client';
ALTER TABLE helix.sub_session_refs DROP CONSTRAINT sub_session_refs_status_check;
ALTER TABLE helix.sub_session_refs ADD CONSTRAINT sub_session_refs_status_check
    CHECK (status IN ('running', 'completed', 'failed'));
