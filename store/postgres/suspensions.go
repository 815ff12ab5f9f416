package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

var _ store.SuspensionStore = (*Store)(nil)

// WithClock sets where the store reads the time of the calls that wait
// for people: when a call was suspended (its deadline is that plus the
// tool's client timeout), answered, timed out or taken. For tests that move
// time forward (helixtest.Clock, through engine.Config.Clock); the engine's
// waits must read the same clock. Default: time.Now.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// nowMS is the store's clock (WithClock) in Unix ms.
func (s *Store) nowMS() int64 {
	if now := s.shared.opts.now; now != nil {
		return now().UnixMilli()
	}
	return time.Now().UnixMilli()
}

// lockTree locks the root session of sessionID, then the session itself
// when it is another one, and returns both (the same value for a root
// session). The root's CompletedClientToolCalls holds the entries of ids
// alone (the calls the caller looks at; completedOnly).
func lockTree(ctx context.Context, q Querier, s *Store, sessionID string, ids []string) (sess, root *store.SessionState, err error) {
	// The root, found and locked in one statement (a root session is its
	// own root: the common case costs one round trip).
	root, err = scanSession(q.QueryRow(ctx, `SELECT `+sessionColumnsWith(completedOnly(2))+` FROM helix.sessions
		WHERE session_id = (SELECT root_session_id FROM helix.sessions WHERE session_id = $1) FOR UPDATE`, sessionID, ids))
	if isNoRows(err) {
		return nil, nil, notFound("session", sessionID)
	}
	if err != nil {
		return nil, nil, err
	}
	if root.SessionID == sessionID {
		return root, root, nil
	}
	sess, err = s.loadState(ctx, q, sessionID, true)
	return sess, root, err
}

// lockRoot locks root session rootSessionID and returns it, its
// CompletedClientToolCalls holding the entries of ids alone (as lockTree's
// root).
func lockRoot(ctx context.Context, q Querier, rootSessionID string, ids []string) (*store.SessionState, error) {
	root, err := scanSession(q.QueryRow(ctx, `SELECT `+sessionColumnsWith(completedOnly(2))+` FROM helix.sessions
		WHERE session_id = $1 FOR UPDATE`, rootSessionID, ids))
	if isNoRows(err) {
		return nil, notFound("session", rootSessionID)
	}
	return root, err
}

// setPending writes a session's pending calls, its row's suspended step ID
// being stepID.
func setPending(ctx context.Context, q Querier, sessionID, stepID string, pending map[string]store.PendingClientToolCall) error {
	var w rowWrite
	if err := w.pending(sessionID, stepID, pending); err != nil {
		return err
	}
	return w.exec(ctx, q, sessionID)
}

// rowWrite is one update of a session's row: what a HITL transaction
// changes in it, written by one statement (a root session that waits
// itself has its pending calls and its maps written together, one row
// version and one WAL record instead of two).
type rowWrite struct {
	sets []string
	args []any
	// done and dropped change the completed calls' map by entry, never
	// whole (completedOnly).
	done    map[string]int64
	dropped []string
}

// set assigns column the next argument, arg.
func (w *rowWrite) set(column string, arg any) {
	w.args = append(w.args, arg)
	w.sets = append(w.sets, column+" = $"+strconv.Itoa(len(w.args)+1))
}

// pending sets the pending calls of session sessionID, the row's, whose
// suspended step ID is stepID after the write.
func (w *rowWrite) pending(sessionID, stepID string, pending map[string]store.PendingClientToolCall) error {
	b, err := encodePending(sessionID, stepID, pending)
	if err != nil {
		return err
	}
	w.set("pending_client_tool_calls", b)
	return nil
}

// ownership sets root session root's ownership map, its row keeping the
// pending calls pending after the write.
func (w *rowWrite) ownership(root *store.SessionState, pending map[string]store.PendingClientToolCall) error {
	b, err := encodeOwnership(root.SessionID, root.ClientToolCallOwnership, pending, root.IsRoot())
	if err != nil {
		return err
	}
	w.set("client_tool_call_ownership", b)
	return nil
}

// complete records call id of a root session's conversation as resolved at
// at (Unix ms; negative: timed out), in its map and in root's copy.
func (w *rowWrite) complete(root *store.SessionState, id string, at int64) {
	if root.CompletedClientToolCalls == nil {
		root.CompletedClientToolCalls = map[string]int64{}
	}
	root.CompletedClientToolCalls[id] = at
	if w.done == nil {
		w.done = map[string]int64{}
	}
	w.done[id] = at
}

// exec writes w, held for the transaction's next statement when q holds
// writes; nothing when w is empty.
func (w *rowWrite) exec(ctx context.Context, q Querier, sessionID string) error {
	sets, args := slices.Clip(w.sets), append([]any{sessionID}, w.args...)
	if len(w.done) > 0 || len(w.dropped) > 0 {
		done, err := jsonObject(w.done)
		if err != nil {
			return err
		}
		dropped := w.dropped
		if dropped == nil {
			dropped = []string{} // NULL would make the map NULL
		}
		args = append(args, dropped, done)
		sets = append(sets, "completed_client_tool_calls = (completed_client_tool_calls - $"+strconv.Itoa(len(args)-1)+
			"::text[]) || $"+strconv.Itoa(len(args))+"::jsonb")
	}
	if len(sets) == 0 {
		return nil
	}
	return execLater(ctx, q, `UPDATE helix.sessions SET `+strings.Join(sets, ", ")+`, version = version + 1, updated_at = now()
		WHERE session_id = $1`, args...)
}

// writesFor returns the write of sess and that of root: the same one when
// sess is the root.
func writesFor(sess, root *store.SessionState) (sw, rw *rowWrite) {
	rw = &rowWrite{}
	if sess.SessionID == root.SessionID {
		return rw, rw
	}
	return &rowWrite{}, rw
}

// execWrites runs rw (the root's) then sw (sess's, when another row): the
// order the rows were locked in.
func execWrites(ctx context.Context, q Querier, sess, root *store.SessionState, sw, rw *rowWrite) error {
	if err := rw.exec(ctx, q, root.SessionID); err != nil {
		return err
	}
	if sw == rw {
		return nil
	}
	return sw.exec(ctx, q, sess.SessionID)
}

// unresolved lists the calls of run still waiting, by step and position.
func unresolved(pending map[string]store.PendingClientToolCall, runID string) []string {
	var calls []store.PendingClientToolCall
	for _, p := range pending {
		if p.RunID == runID && !p.Resolved() {
			calls = append(calls, p)
		}
	}
	return callIDs(sortCalls(calls))
}

func sortCalls(calls []store.PendingClientToolCall) []store.PendingClientToolCall {
	store.SortPendingCalls(calls)
	return calls
}

func callIDs(calls []store.PendingClientToolCall) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = c.ToolCallID
	}
	return out
}

// appendAll appends chunks to the session's stream in q's transaction.
func (s *Store) appendAll(ctx context.Context, st *store.SessionState, runID string, chunks []helix.Chunk) error {
	return s.appendAhead(ctx, st, runID, nil, chunks)
}

// appendAhead is appendAll with the writes ahead first, in one append.
func (s *Store) appendAhead(ctx context.Context, st *store.SessionState, runID string, ahead []store.ChunkWrite, chunks []helix.Chunk) error {
	if len(ahead)+len(chunks) == 0 {
		return nil
	}
	writes := slices.Clip(ahead)
	for _, c := range chunks {
		writes = append(writes, store.ChunkWrite{RunID: runID, Chunk: c})
	}
	return s.AppendHeld(ctx, st.StreamID, writes)
}

// recordUsage records usage rows for the session, defaulting run and step.
func (s *Store) recordUsage(ctx context.Context, sessionID, runID string, step int, rows []store.UsageRecord) error {
	for i := range rows {
		rows[i].SessionID = sessionID
		rows[i].RunID = cmp.Or(rows[i].RunID, runID)
		if rows[i].Step == 0 {
			rows[i].Step = step
		}
	}
	if len(rows) == 0 {
		return nil
	}
	return s.RecordUsage(ctx, rows)
}

// endInterrupted consumes the session's interrupt flag, when set, and ends
// the session and the run interrupted with the chunk the caller builds.
func (s *Store) endInterrupted(ctx context.Context, st *store.SessionState, runID string, step int, chunk func(string) helix.Chunk) (bool, string, error) {
	if !st.InterruptRequested {
		// st was read with the row locked (lockTree): the flag cannot be
		// set before this transaction ends.
		return false, "", nil
	}
	req, err := s.CheckInterruptFlag(ctx, st.SessionID)
	if err != nil || !req.Requested {
		return false, "", err
	}
	if err := s.UpdateStatus(ctx, st.SessionID, helix.SessionInterrupted, &store.StatusUpdate{
		InterruptContext: &store.InterruptContext{Reason: req.Reason, StepCount: step, Timestamp: time.Now().UnixMilli()},
	}); err != nil {
		return false, "", err
	}
	if err := s.UpdateRunStatus(ctx, runID, helix.RunInterrupted, &store.RunUpdate{StepCount: &step, Error: req.Reason}); err != nil {
		return false, "", err
	}
	if chunk != nil {
		if err := s.appendAll(ctx, st, runID, []helix.Chunk{chunk(req.Reason)}); err != nil {
			return false, "", err
		}
	}
	return true, req.Reason, nil
}

// SuspendStep implements store.SuspensionStore.
func (s *Store) SuspendStep(ctx context.Context, p store.SuspendParams) (*store.SuspendResult, error) {
	if len(p.Pending) == 0 {
		return nil, fmt.Errorf("store: suspend step of %s: no pending calls", p.SessionID)
	}
	ids := make([]string, len(p.Pending))
	for i, pc := range p.Pending {
		ids[i] = pc.Call.ToolCallID
	}
	var res store.SuspendResult
	err := s.tx(ctx, func(q Querier) error {
		tx := s.WithQuerier(q)
		sess, root, err := lockTree(ctx, q, s, p.SessionID, ids)
		if err != nil {
			return err
		}
		if sess.Status != helix.SessionActive {
			return fmt.Errorf("session %s is %s (aborted or ended while step %d ran): the step is discarded", sess.SessionID, sess.Status, p.Step)
		}
		now := s.nowMS()
		pending := sess.PendingClientToolCalls
		if pending == nil {
			pending = map[string]store.PendingClientToolCall{}
		}
		// A root that waits alone, before and after (ownsEveryCall): no
		// sub-agent's waiting changes.
		alone := sess.SessionID == root.SessionID && ownsEveryCall(root)
		if root.ClientToolCallOwnership == nil {
			root.ClientToolCallOwnership = map[string]string{}
		}
		for _, pc := range p.Pending {
			c := pc.Call
			if c.ToolCallID == "" || c.ToolName == "" || (c.Kind != helix.SubmissionClientToolResult && c.Kind != helix.SubmissionApprovalResponse) {
				return fmt.Errorf("pending call %+v needs an ID, a tool name and a submission kind", c)
			}
			if owner, taken := root.ClientToolCallOwnership[c.ToolCallID]; taken || root.CompletedClientToolCalls[c.ToolCallID] != 0 {
				return fmt.Errorf("tool call ID %s is already used in this conversation (owned by %s): tool call IDs must be unique", c.ToolCallID, owner)
			}
			c.OwnerSessionID, c.RunID, c.Step, c.CreatedAt = sess.SessionID, p.RunID, p.Step, now
			if pc.Timeout > 0 {
				c.DeadlineAt = now + pc.Timeout.Milliseconds()
			}
			pending[c.ToolCallID] = c
			root.ClientToolCallOwnership[c.ToolCallID] = sess.SessionID
			res.Pending = append(res.Pending, c)
		}
		res.Pending = sortCalls(res.Pending)
		sw, rw := writesFor(sess, root)
		rootPending := root.PendingClientToolCalls
		if sess.SessionID == root.SessionID {
			rootPending = pending
		}
		if err := rw.ownership(root, rootPending); err != nil {
			return err
		}
		if err := sw.pending(sess.SessionID, p.StepID, pending); err != nil {
			return err
		}
		sw.set("suspended_step", rawOrNil(p.Record))
		sw.set("suspended_step_id", p.StepID)
		if err := execWrites(ctx, q, sess, root, sw, rw); err != nil {
			return err
		}
		if err := tx.appendAhead(ctx, sess, p.RunID, p.Ahead, p.Chunks); err != nil {
			return err
		}
		if err := tx.recordUsage(ctx, sess.SessionID, p.RunID, p.Step, p.Usage); err != nil {
			return err
		}
		// The suspended step has not committed: the run's and the interrupt
		// context's step count is the one before it (as in ResolveToolCall).
		step := p.Step - 1
		if res.Interrupted, res.InterruptReason, err = tx.endInterrupted(ctx, sess, p.RunID, step, p.Interrupted); err != nil || res.Interrupted {
			return err
		}
		// The run exists (the suspension's caller runs it): held for the
		// next statement, its row count unread.
		if err := execLater(ctx, q, `UPDATE helix.runs SET status = $2, step_count = $3, completed_at = NULL, updated_at = now()
			WHERE run_id = $1`, p.RunID, string(helix.RunSuspendedClientTool), step); err != nil {
			return err
		}
		if alone {
			return nil
		}
		return syncAwaiting(ctx, q, root.SessionID)
	})
	if err != nil {
		return nil, wrap(err, "suspend step %d of %s", p.Step, p.SessionID)
	}
	return &res, nil
}

// ResolveToolCall implements store.SuspensionStore.
func (s *Store) ResolveToolCall(ctx context.Context, p store.ResolveParams) (*store.ResolveResult, error) {
	var res store.ResolveResult
	err := s.tx(ctx, func(q Querier) error {
		tx := s.WithQuerier(q)
		sess, root, err := lockTree(ctx, q, s, p.SessionID, nil)
		if err != nil {
			return err
		}
		call, ok := sess.PendingClientToolCalls[p.ToolCallID]
		if !ok {
			return fmt.Errorf("tool call %s is not pending in session %s", p.ToolCallID, p.SessionID)
		}
		now := s.nowMS()
		newly := false
		sw, rw := writesFor(sess, root)
		if !call.Resolved() && p.TimedOut {
			call.TimedOutAt, newly = now, true
			rw.complete(root, p.ToolCallID, -now)
		}
		if call.Resolved() && call.ConsumedAt == 0 {
			call.ConsumedAt = now
			if p.Outcome != nil {
				chunks, usage := p.Outcome(call)
				if err := tx.appendAll(ctx, sess, p.RunID, chunks); err != nil {
					return err
				}
				if err := tx.recordUsage(ctx, sess.SessionID, p.RunID, p.Step, usage); err != nil {
					return err
				}
			}
			sess.PendingClientToolCalls[p.ToolCallID] = call
			if err := sw.pending(sess.SessionID, sess.SuspendedStepID, sess.PendingClientToolCalls); err != nil {
				return err
			}
		}
		if err := execWrites(ctx, q, sess, root, sw, rw); err != nil {
			return err
		}
		res.Call = call
		if !p.LeaveInterrupt {
			if res.Interrupted, res.InterruptReason, err = tx.endInterrupted(ctx, sess, p.RunID, p.Step-1, p.Interrupted); err != nil || res.Interrupted {
				return err
			}
		}
		if sess.Status != helix.SessionActive {
			return fmt.Errorf("session %s is %s: the wait for tool call %s is abandoned", sess.SessionID, sess.Status, p.ToolCallID)
		}
		res.Unresolved = unresolved(sess.PendingClientToolCalls, p.RunID)
		if newly && len(res.Unresolved) == 0 {
			if err := execLater(ctx, q, `UPDATE helix.runs SET status = 'running', answered_at = now(), updated_at = now()
				WHERE run_id = $1 AND status = 'suspended_client_tool'`, p.RunID); err != nil {
				return err
			}
		}
		if newly && !ownsEveryCall(root) {
			return syncAwaiting(ctx, q, root.SessionID)
		}
		return nil
	})
	if err != nil {
		return nil, wrap(err, "resolve tool call %s of %s", p.ToolCallID, p.SessionID)
	}
	return &res, nil
}

// Answer is what a run waiting for a tool call finds (PeekAnswer).
type Answer struct {
	// MessageWaiting reports an untaken message on the call's topic for
	// the waiting workflow.
	MessageWaiting bool
	// Call is the pending call as recorded (Found false: not pending).
	Call  store.PendingClientToolCall
	Found bool
	// Interrupt reports the session's interrupt flag.
	Interrupt bool
	// Owned reports that the waiting execution still owns workflowID: its
	// DBOS owner token is the one PeekAnswer was given. An execution that
	// lost its workflow (cancelled with DBOS's tools, then resumed; taken
	// over) must not act on an answer, which is the owner's.
	Owned bool
	// Asleep reports that the run hibernated in the waiting execution, or
	// was woken since (its wakes past Waiter.Wake): a replay of a workflow
	// whose hibernation committed (and writes no journal record) but whose
	// end DBOS did not record. It ends as it did, hibernated; the answers
	// are the continuation's.
	Asleep bool
}

// Waiter is the execution of a run that waits for a tool call (PeekAnswer).
type Waiter struct {
	// SessionID is the session whose pending call the run waits for.
	SessionID string
	// RunID is the waiting run (Answer.Asleep reads its row).
	RunID string
	// WorkflowID is the run's workflow, the messages' destination.
	WorkflowID string
	// Self is the execution's own workflow: WorkflowID, or continuation
	// Wake of it (0: WorkflowID itself). Owner is its DBOS owner token.
	Self  string
	Wake  int
	Owner string
}

// PeekAnswer reads, locking nothing and in one statement, whether a message
// for a tool call waits for w's run (the messages' destination, its
// workflow) on topic (DBOS's notifications), the call as pending in the
// session, the session's interrupt flag, whether w still owns its workflow
// and whether the run hibernated already (Answer.Asleep): what a run that
// waits for the call looks at when it is woken, before it takes the answer
// in a transaction of its own.
func (s *Store) PeekAnswer(ctx context.Context, w Waiter, toolCallID, topic string) (Answer, error) {
	var a Answer
	var raw []byte
	var stepID string
	err := s.q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM dbos.notifications
			WHERE destination_uuid = $3 AND topic = $4 AND NOT consumed),
		pending_client_tool_calls -> $2, COALESCE(suspended_step_id, ''), interrupt_requested,
		EXISTS (SELECT 1 FROM dbos.workflow_status WHERE workflow_uuid = $6 AND owner_xid = $5),
		EXISTS (SELECT 1 FROM helix.runs WHERE run_id = $7 AND (hibernated_at IS NOT NULL OR wakes > $8))
		FROM helix.sessions WHERE session_id = $1`, w.SessionID, toolCallID, w.WorkflowID, topic, w.Owner, w.Self, w.RunID, w.Wake).
		Scan(&a.MessageWaiting, &raw, &stepID, &a.Interrupt, &a.Owned, &a.Asleep)
	if isNoRows(err) {
		return a, notFound("session", w.SessionID)
	}
	if err != nil {
		return a, wrap(err, "read the answer to tool call %s of %s", toolCallID, w.SessionID)
	}
	if len(raw) > 0 {
		if a.Call, err = decodePendingCall(w.SessionID, stepID, toolCallID, raw); err != nil {
			return a, fmt.Errorf("store: %w", err)
		}
		a.Found = true
	}
	return a, nil
}

// RecordSubmission implements store.SuspensionStore.
func (s *Store) RecordSubmission(ctx context.Context, rootSessionID string, sub helix.ToolSubmission) (*store.RecordedSubmission, error) {
	if err := sub.Validate(); err != nil {
		return nil, err
	}
	reject := func(code, sessionID, format string, args ...any) error {
		return &helix.SubmissionError{Code: code, SessionID: sessionID, ToolCallID: sub.ToolCallID, Reason: fmt.Sprintf(format, args...)}
	}
	var res store.RecordedSubmission
	err := s.tx(ctx, func(q Querier) error {
		root, err := lockRoot(ctx, q, rootSessionID, []string{sub.ToolCallID})
		if errors.Is(err, helix.ErrNotFound) {
			return reject(helix.SubmissionUnknownToolCall, rootSessionID, "session %s does not exist", rootSessionID)
		}
		if err != nil {
			return err
		}
		if !root.IsRoot() {
			return reject(helix.SubmissionNotRoot, rootSessionID, "session %s is a sub-agent session: submit on its root session %s, which routes the answer", rootSessionID, root.RootSessionID)
		}
		if at, done := root.CompletedClientToolCalls[sub.ToolCallID]; done && at < 0 {
			return reject(helix.SubmissionTimedOut, rootSessionID, "the call's deadline passed at %s; the model was told it timed out", time.UnixMilli(-at).UTC().Format(time.RFC3339))
		} else if done {
			res.AlreadyCompleted = true
		}
		ownerID, owned := root.ClientToolCallOwnership[sub.ToolCallID]
		if !owned {
			if res.AlreadyCompleted {
				return nil // answered, and its step has committed
			}
			return reject(helix.SubmissionUnknownToolCall, rootSessionID, "no tool call with this ID waits in this conversation (check the ID, and that it belongs to session %s)", rootSessionID)
		}
		owner := root
		if ownerID != root.SessionID {
			if owner, err = s.loadState(ctx, q, ownerID, true); err != nil {
				return err
			}
		}
		call, ok := owner.PendingClientToolCalls[sub.ToolCallID]
		if !ok {
			return reject(helix.SubmissionUnknownToolCall, rootSessionID, "the call is routed to session %s, which does not wait for it", ownerID)
		}
		res.Call = call
		if res.AlreadyCompleted || call.Submission != nil {
			res.AlreadyCompleted = true
			return nil
		}
		if call.TimedOutAt != 0 {
			return reject(helix.SubmissionTimedOut, rootSessionID, "the call's deadline passed at %s; the model was told it timed out", time.UnixMilli(call.TimedOutAt).UTC().Format(time.RFC3339))
		}
		switch owner.Status {
		case helix.SessionActive:
		case helix.SessionInterrupted:
			return reject(helix.SubmissionSessionInterrupted, rootSessionID, "session %s was interrupted while it waited: resume it, then answer the calls still waiting", ownerID)
		default:
			return reject(helix.SubmissionNotWaiting, rootSessionID, "session %s is %s (%s): nothing waits for this call any more; retry the session to run it again", ownerID, owner.Status, cmp.Or(owner.Error, "no error recorded"))
		}
		if call.Kind != sub.Kind {
			return reject(helix.SubmissionKindMismatch, rootSessionID, "tool %q waits for a %s, not a %s", call.ToolName, call.Kind, sub.Kind)
		}
		if sub.Kind == helix.SubmissionClientToolResult && len(sub.Result) > 0 && len(call.OutputSchema) > 0 {
			schema, err := helix.CompileSchema(call.OutputSchema)
			if err != nil {
				return fmt.Errorf("compile the output schema of tool %q: %w", call.ToolName, err)
			}
			if err := schema.Validate(fmt.Sprintf("result of tool %q", call.ToolName), sub.Result); err != nil {
				var ve *helix.ValidationError
				se := reject(helix.SubmissionInvalidResult, rootSessionID, "%v", err).(*helix.SubmissionError)
				if errors.As(err, &ve) {
					se.Violations = ve.Violations
				}
				return se
			}
		}
		now := s.nowMS()
		stored := sub
		call.Submission, call.SubmittedAt, call.SentTo = &stored, now, call.WorkflowID
		owner.PendingClientToolCalls[sub.ToolCallID] = call
		res.Call = call
		ow, rw := writesFor(owner, root)
		if err := ow.pending(owner.SessionID, owner.SuspendedStepID, owner.PendingClientToolCalls); err != nil {
			return err
		}
		rw.complete(root, sub.ToolCallID, now)
		if err := execWrites(ctx, q, owner, root, ow, rw); err != nil {
			return err
		}
		wait := float64(now - call.CreatedAt)
		if err := s.WithQuerier(q).RecordUsage(ctx, []store.UsageRecord{{
			SessionID: owner.SessionID, RunID: call.RunID, Step: call.Step, SourceType: store.UsageClientToolWaitMS,
			SourceName: call.ToolName, Value: &wait, Success: true, Key: "client_tool_wait:" + sub.ToolCallID,
		}}); err != nil {
			return err
		}
		res.Unresolved = unresolved(owner.PendingClientToolCalls, call.RunID)
		if len(res.Unresolved) == 0 {
			if err := execLater(ctx, q, `UPDATE helix.runs SET status = 'running', answered_at = now(), updated_at = now()
				WHERE run_id = $1 AND status = 'suspended_client_tool'`, call.RunID); err != nil {
				return err
			}
		}
		if ownsEveryCall(root) {
			// No sub-agent waits, before or after this answer (the root's
			// ownership map routes every waiting call of the conversation):
			// nothing to recompute.
			return nil
		}
		return syncAwaiting(ctx, q, root.SessionID)
	})
	if err != nil {
		return nil, wrap(err, "submit tool call %s to %s", sub.ToolCallID, rootSessionID)
	}
	return &res, nil
}

// ownsEveryCall reports whether every call routed by a root session's
// ownership map is the root's own, and the root waits for no sub-agent: no
// sub-agent of the conversation waits for a person (the map routes every
// call that waits in it), so syncAwaiting would change nothing while the
// map stays so.
func ownsEveryCall(root *store.SessionState) bool {
	if len(root.SuspendedAwaitingChildren) > 0 {
		return false
	}
	for _, owner := range root.ClientToolCallOwnership {
		if owner != root.SessionID {
			return false
		}
	}
	return true
}

// RetargetPending implements store.SuspensionStore.
func (s *Store) RetargetPending(ctx context.Context, sessionID, runID, workflowID string) ([]string, error) {
	var out []string
	err := s.tx(ctx, func(q Querier) error {
		sess, _, err := lockTree(ctx, q, s, sessionID, nil)
		if err != nil {
			return err
		}
		for id, c := range sess.PendingClientToolCalls {
			c.RunID, c.WorkflowID = runID, workflowID
			sess.PendingClientToolCalls[id] = c
		}
		out = unresolved(sess.PendingClientToolCalls, runID)
		return setPending(ctx, q, sessionID, sess.SuspendedStepID, sess.PendingClientToolCalls)
	})
	return out, wrap(err, "retarget pending calls of %s", sessionID)
}

// SaveSuspendedStep implements store.SuspensionStore.
func (s *Store) SaveSuspendedStep(ctx context.Context, sessionID string, record json.RawMessage) error {
	if !json.Valid(record) {
		return fmt.Errorf("store: save the suspended step of %s: the record is not valid JSON", sessionID)
	}
	n, err := s.q.Exec(ctx, `UPDATE helix.sessions SET suspended_step = $2, version = version + 1, updated_at = now()
		WHERE session_id = $1 AND suspended_step IS NOT NULL`, sessionID, []byte(record))
	if err == nil && n == 0 {
		err = fmt.Errorf("session %s has no suspended step", sessionID)
	}
	return wrap(err, "save the suspended step of %s", sessionID)
}

// ListPendingCalls implements store.SuspensionStore.
func (s *Store) ListPendingCalls(ctx context.Context, sessionID string) ([]store.PendingClientToolCall, error) {
	rows, err := s.q.Query(ctx, `WITH RECURSIVE tree AS (
			SELECT session_id FROM helix.sessions WHERE session_id = $1
			UNION
			SELECT c.session_id FROM helix.sessions c JOIN tree t ON c.parent_session_id = t.session_id
		)
		SELECT s.session_id, COALESCE(s.suspended_step_id, ''), p.key, p.value
		FROM helix.sessions s JOIN tree USING (session_id), jsonb_each(s.pending_client_tool_calls) p`, sessionID)
	if err != nil {
		return nil, wrap(err, "list pending calls of %s", sessionID)
	}
	defer rows.Close()
	var out []store.PendingClientToolCall
	for rows.Next() {
		var owner, stepID, key string
		var raw []byte
		if err := rows.Scan(&owner, &stepID, &key, &raw); err != nil {
			return nil, wrap(err, "list pending calls of %s", sessionID)
		}
		c, err := decodePendingCall(owner, stepID, key, raw)
		if err != nil {
			return nil, fmt.Errorf("store: list pending calls of %s: %w", sessionID, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(err, "list pending calls of %s", sessionID)
	}
	return sortCalls(out), nil
}

// DiscardPending implements store.SuspensionStore.
func (s *Store) DiscardPending(ctx context.Context, sessionID string) ([]store.PendingClientToolCall, error) {
	var out []store.PendingClientToolCall
	err := s.tx(ctx, func(q Querier) error {
		sess, root, err := lockTree(ctx, q, s, sessionID, nil)
		if err != nil {
			return err
		}
		var rw rowWrite
		for id, c := range sess.PendingClientToolCalls {
			out = append(out, c)
			delete(root.ClientToolCallOwnership, id)
			// A dropped call was never part of the conversation: its ID
			// may come back (a scripted model replays its IDs).
			rw.dropped = append(rw.dropped, id)
		}
		out = sortCalls(out)
		rootPending := root.PendingClientToolCalls
		if sess.SessionID == root.SessionID {
			rootPending = nil // cleared below
		}
		if err := rw.ownership(root, rootPending); err != nil {
			return err
		}
		if err := rw.exec(ctx, q, root.SessionID); err != nil {
			return err
		}
		if _, err = q.Exec(ctx, `UPDATE helix.sessions SET pending_client_tool_calls = '{}', suspended_step = NULL,
			suspended_step_id = NULL, suspended_awaiting_children = '{}', version = version + 1, updated_at = now()
			WHERE session_id = $1`, sessionID); err != nil {
			return err
		}
		return syncAwaiting(ctx, q, root.SessionID)
	})
	return out, wrap(err, "discard pending calls of %s", sessionID)
}

// clearSuspensionSQL removes the pending calls of a sub-agent's suspended
// step from their ownership on its root session, ahead of the commit that
// appends their results. It locks the root row first. A root session's own
// calls leave its map in clearOwnSuspensionSQL, which writes the row once.
const clearSuspensionSQL = `UPDATE helix.sessions r
	SET client_tool_call_ownership = r.client_tool_call_ownership - ARRAY(SELECT jsonb_object_keys(s.pending_client_tool_calls)),
		version = r.version + 1, updated_at = now()
	FROM helix.sessions s WHERE s.session_id = $1 AND r.session_id = s.root_session_id AND r.session_id <> s.session_id`

// clearOwnSuspensionSQL clears a session's own suspension fields, and on a
// root session its pending calls' ownership (what clearSuspensionSQL does
// for a sub-agent's root).
const clearOwnSuspensionSQL = `UPDATE helix.sessions SET
		client_tool_call_ownership = CASE WHEN root_session_id = session_id
			THEN client_tool_call_ownership - ARRAY(SELECT jsonb_object_keys(pending_client_tool_calls))
			ELSE client_tool_call_ownership END,
		pending_client_tool_calls = '{}', suspended_step = NULL, suspended_step_id = NULL,
		suspended_awaiting_children = '{}', version = version + 1, updated_at = now()
	WHERE session_id = $1`

// clearSuspension runs clearSuspensionSQL and clearOwnSuspensionSQL: two
// writes, held for the transaction's next statement when q holds writes
// (one row written once for a root session, the root then the session for
// a sub-agent).
func clearSuspension(ctx context.Context, q Querier, sessionID string) error {
	if err := execLater(ctx, q, clearSuspensionSQL, sessionID); err != nil {
		return err
	}
	return execLater(ctx, q, clearOwnSuspensionSQL, sessionID)
}
