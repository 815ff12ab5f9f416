package workflows

import (
	"bytes"
	"encoding/json"
	"fmt"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/steps"
)

// A model call's record written as the step's assistant message row
// (helix.messages, pending until the step's commit counts it): the row holds
// the message, messages.meta the rest of the record. The layout of meta:
// [turn, seg, id - JournalBase, started, took, durationMs, type,
// stopReason, inputTokens, outputTokens, cachedTokens, cacheWriteTokens,
// model, output, error, errorCode], trailing defaults left out, type null
// for modelRowType. helix.message_record rebuilds the same output in SQL.

// Positions in messages.meta.
const (
	metaTurn = iota
	metaSegment
	metaID
	metaStarted
	metaTook
	metaDurationMS
	metaType
	metaStopReason
	metaInputTokens
	metaOutputTokens
	metaCachedTokens
	metaCacheWriteTokens
	metaModel
	metaOutput
	metaError
	metaErrorCode
	metaFields
)

// modelRowType is the result type meta leaves out (null): a step whose
// record is written at once has tool calls.
const modelRowType = helix.StepToolCalls

// modelRow is a model call's record as a message row: what
// helix.record_model_message writes, and what the write found.
type modelRow struct {
	seq     int
	message string
	meta    string
	// stored are the row's tool calls as the database holds them, which
	// the step's tools run with (nil until a write or look-up finds them;
	// then set even when the record went to helix.step_journal).
	stored []helix.ToolCall
	found  bool
}

// newModelRow renders out, the record rec of a model call of the run of
// turn turn in the journal's segment seg, as a message row, when the row
// gives the record back exactly (read back: unpackModelRow of what it
// writes decodes to out); ok false otherwise (the record goes to
// helix.step_journal as before).
func newModelRow(turn, seg int, rec journalRecord, out steps.ModelOutput) (*modelRow, bool, error) {
	if out.Failure != nil || rec.Err != nil || rec.Output == nil {
		return nil, false, nil
	}
	r := out.Result
	msg := helix.AssistantMessage(r.Content, r.ToolCalls...)
	msg.Thinking = r.Thinking
	if msg.Validate() != nil {
		return nil, false, nil
	}
	message, err := json.Marshal(msg)
	if err != nil {
		return nil, false, fmt.Errorf("encode the assistant message of step %d: %w", rec.ID, err)
	}
	var output json.RawMessage
	if len(r.Output) > 0 {
		output = r.Output
	}
	typ := any(r.Type)
	if r.Type == modelRowType {
		typ = nil
	}
	meta := []any{turn, seg, rec.ID - JournalBase, rec.Started, rec.Completed - rec.Started, out.DurationMS, typ,
		r.StopReason, r.Usage.InputTokens, r.Usage.OutputTokens, r.Usage.CachedTokens, r.Usage.CacheWriteTokens,
		r.Model, output, r.Error, r.ErrorCode}
	for len(meta) > metaTurn+4 && isDefault(meta[len(meta)-1]) {
		meta = meta[:len(meta)-1]
	}
	metaText, err := json.Marshal(meta)
	if err != nil {
		return nil, false, fmt.Errorf("encode the record of step %d as a message row: %w", rec.ID, err)
	}
	row := &modelRow{seq: out.MessageCount, message: string(message), meta: string(metaText)}
	back, _, err := unpackModelRow(row.seq, row.message, row.meta)
	if err != nil {
		return nil, false, nil
	}
	want, err1 := json.Marshal(out)
	got, err2 := json.Marshal(back)
	if err1 != nil || err2 != nil || !bytes.Equal(want, got) {
		return nil, false, nil
	}
	return row, true, nil
}

// isDefault reports a meta value left out at the end of the array.
func isDefault(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case int:
		return x == 0
	case int64:
		return x == 0
	case string:
		return x == ""
	case helix.StopReason:
		return x == ""
	case helix.StepResultType:
		return x == ""
	case json.RawMessage:
		return x == nil
	}
	return false
}

// unpackModelRow returns the model output a message row holds (seq, the
// message and meta as the database returns them) and its record's times.
func unpackModelRow(seq int, message, meta string) (steps.ModelOutput, [2]int64, error) {
	var out steps.ModelOutput
	var times [2]int64
	var msg helix.Message
	if err := json.Unmarshal([]byte(message), &msg); err != nil {
		return out, times, fmt.Errorf("decode the assistant message at %d: %w", seq, err)
	}
	var fields []json.RawMessage
	if err := json.Unmarshal([]byte(meta), &fields); err != nil {
		return out, times, fmt.Errorf("decode the model record of the message at %d: %w", seq, err)
	}
	if len(fields) < metaTurn+4 || len(fields) > metaFields {
		return out, times, fmt.Errorf("the model record of the message at %d has %d fields", seq, len(fields))
	}
	fields = append(fields, make([]json.RawMessage, metaFields-len(fields))...)
	r := &out.Result
	var took int64
	for _, f := range []struct {
		i int
		v any
	}{{metaStarted, &times[0]}, {metaTook, &took}, {metaDurationMS, &out.DurationMS}, {metaType, &r.Type},
		{metaStopReason, &r.StopReason}, {metaInputTokens, &r.Usage.InputTokens}, {metaOutputTokens, &r.Usage.OutputTokens},
		{metaCachedTokens, &r.Usage.CachedTokens}, {metaCacheWriteTokens, &r.Usage.CacheWriteTokens}, {metaModel, &r.Model},
		{metaError, &r.Error}, {metaErrorCode, &r.ErrorCode}} {
		if fields[f.i] == nil {
			continue
		}
		if err := json.Unmarshal(fields[f.i], f.v); err != nil {
			return out, times, fmt.Errorf("decode field %d of the model record of the message at %d: %w", f.i, seq, err)
		}
	}
	if o := fields[metaOutput]; o != nil && string(o) != "null" {
		r.Output = o
	}
	if r.Type == "" {
		r.Type = modelRowType
	}
	times[1] = times[0] + took
	r.Content, r.ToolCalls, r.Thinking = msg.Content, msg.ToolCalls, msg.Thinking
	out.MessageCount = seq
	return out, times, nil
}

// modelRowRecord returns the journal record a message row holds.
func modelRowRecord(seq int, message, meta string) (journalRecord, error) {
	out, times, err := unpackModelRow(seq, message, meta)
	if err != nil {
		return journalRecord{}, err
	}
	var ids []json.RawMessage
	if err := json.Unmarshal([]byte(meta), &ids); err != nil {
		return journalRecord{}, err
	}
	var id int
	if err := json.Unmarshal(ids[metaID], &id); err != nil {
		return journalRecord{}, fmt.Errorf("decode the step of the model record of the message at %d: %w", seq, err)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return journalRecord{}, fmt.Errorf("encode the model record of the message at %d: %w", seq, err)
	}
	text := codeOutput(string(b))
	return journalRecord{ID: JournalBase + id, Name: steps.NameCallModel, Output: &text, Started: times[0], Completed: times[1]}, nil
}

// storedArguments returns calls with their arguments as every execution of
// the step reads them back: json.Marshal's compact form of the stored text
// (a replay decodes the record json.Marshal wrote; jsonb's text, which a
// row returns, has other spaces), so the first execution's tools and a
// replay's get the same bytes.
func storedArguments(calls []helix.ToolCall) []helix.ToolCall {
	if len(calls) == 0 {
		return calls
	}
	out := make([]helix.ToolCall, len(calls))
	for i, c := range calls {
		out[i] = c
		if len(c.Arguments) == 0 {
			continue
		}
		if b, err := json.Marshal(c.Arguments); err == nil {
			out[i].Arguments = b
		}
	}
	return out
}
