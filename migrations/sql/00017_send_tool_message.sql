-- +goose Up
-- A submission's message to the waiting run, written by the engine in
-- DBOS's own format (what dbos.Send writes: DBOS_JSON, the idempotency key
-- with the destination as message_uuid; DBOS's trigger sends the NOTIFY),
-- so the submission's transaction sends it with its COMMIT in one round
-- trip. A workflow cancelled with DBOS's tools takes nothing: the
-- submission is refused (SQLSTATE HX410) and nothing of it commits.
-- +goose StatementBegin
CREATE FUNCTION helix.send_tool_message(dest text, msg_topic text, msg text, msg_uuid text) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    wf_status text;
BEGIN
    SELECT status INTO wf_status FROM dbos.workflow_status WHERE workflow_uuid = dest;
    IF wf_status IS NULL THEN
        RAISE EXCEPTION 'workflow % does not exist (deleted from DBOS''s tables?): no run can take a message sent to it', dest
            USING ERRCODE = 'HX404';
    END IF;
    IF wf_status = 'CANCELLED' THEN
        RAISE EXCEPTION 'workflow % was cancelled: nothing will take a message sent to it', dest USING ERRCODE = 'HX410';
    END IF;
    INSERT INTO dbos.notifications (destination_uuid, topic, message, serialization, message_uuid, created_at_epoch_ms)
    VALUES (dest, msg_topic, msg, 'DBOS_JSON', msg_uuid, (EXTRACT(EPOCH FROM now()) * 1000)::bigint)
    ON CONFLICT (message_uuid) DO NOTHING;
END
$fn$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION helix.send_tool_message(text, text, text, text);
