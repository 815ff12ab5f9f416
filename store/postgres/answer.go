package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// Message is a DBOS message to the run that waits for a tool call, as
// [SendMessageStatement] sends it: its topic, its payload (DBOS's
// serialization: base64 of its JSON) and its idempotency key, to which the
// destination workflow is appended ([MessageKey]).
type Message struct {
	Topic, Payload, Key string
}

// MessageKey is the idempotency key of a message with key key sent to
// workflowID: one message per key and destination (a resume moves the
// calls to another workflow, which gets its own).
func MessageKey(key, workflowID string) string { return key + "::" + workflowID }

// SubmitAnswer records sub, an answer to a tool call that waits in root
// session rootSessionID, and sends the message that carries it to the
// waiting run, in one statement and one round trip (helix.submit_answer),
// when the answer takes the common path: the root session is active and
// waits for the call itself (no sub-agent of its conversation waits), the
// call waits unanswered for an answer of sub's kind, and no output schema
// validates it. message builds the message from the time the answer is
// recorded (the store's clock, Unix ms).
//
// ok false with a nil error means nothing was written: RecordSubmission
// then records the answer, or reports why it is refused, already answered
// or misrouted. An error that says "(recorded)" came after the answer was
// recorded (its row could not be read back); any other wrote nothing. The
// writes are RecordSubmission's with the message SendMessageStatement sends
// (without announceWake): woke is the announcement of the hibernated run
// the message woke, for the caller to send once the statement returned
// ([Store.Announce] on [RunRecordedChannel]); nil when it woke none. A
// workflow cancelled with DBOS's tools fails the statement with SQLSTATE
// HX410, and nothing is written.
func (s *Store) SubmitAnswer(ctx context.Context, rootSessionID string, sub helix.ToolSubmission,
	message func(submittedAt int64) (Message, error)) (rec *store.RecordedSubmission, woke *string, ok bool, err error) {
	if err := sub.Validate(); err != nil {
		return nil, nil, false, err
	}
	now := s.nowMS()
	m, err := message(now)
	if err != nil {
		return nil, nil, false, err
	}
	raw, err := json.Marshal(sub)
	if err != nil {
		return nil, nil, false, fmt.Errorf("store: submit tool call %s to %s: encode the submission: %w", sub.ToolCallID, rootSessionID, err)
	}
	var call []byte
	var remaining []string
	err = s.q.QueryRow(ctx, `SELECT applied, call, remaining, woke FROM helix.submit_answer($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		rootSessionID, sub.ToolCallID, string(sub.Kind), sub.Kind == helix.SubmissionClientToolResult && len(sub.Result) > 0, raw, now, store.UsageClientToolWaitMS, m.Topic, m.Payload, m.Key).
		Scan(&ok, &call, &remaining, &woke)
	if err != nil || !ok {
		return nil, nil, false, wrap(err, "submit tool call %s to %s", sub.ToolCallID, rootSessionID)
	}
	c, err := decodePendingCall(rootSessionID, "", sub.ToolCallID, call)
	if err != nil {
		return nil, nil, false, fmt.Errorf("store: submit tool call %s to %s (recorded): %w", sub.ToolCallID, rootSessionID, err)
	}
	return &store.RecordedSubmission{Call: c, Unresolved: remaining}, woke, true, nil
}
