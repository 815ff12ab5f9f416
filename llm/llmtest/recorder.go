package llmtest

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	helix "github.com/helix-agents/helix-dbos"
)

// EventKind names the callback an [Event] came from.
type EventKind string

// Event kinds, one per [helix.StreamCallbacks] field.
const (
	EventText         EventKind = "text"
	EventThinking     EventKind = "thinking"
	EventToolArgStart EventKind = "tool_arg_start"
	EventToolArgDelta EventKind = "tool_arg_delta"
	EventToolArgEnd   EventKind = "tool_arg_end"
)

// Event is one callback invocation recorded by a [Recorder].
type Event struct {
	Kind EventKind
	// Text is the delta of a text, thinking or tool-argument event.
	Text string
	// Complete is the complete flag of a thinking event.
	Complete bool
	// ToolCallID and ToolName identify the call of a tool-argument event
	// (ToolName on starts only).
	ToolCallID string
	ToolName   string
}

// Recorder records what a model streams through its callbacks, in order.
// It is safe for concurrent use; its zero value is not usable, call
// [NewRecorder].
type Recorder struct {
	mu     sync.Mutex
	events []Event
	first  chan struct{}
	once   sync.Once
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder { return &Recorder{first: make(chan struct{})} }

// Callbacks returns stream callbacks that record every invocation.
func (r *Recorder) Callbacks() helix.StreamCallbacks {
	return helix.StreamCallbacks{
		OnTextDelta: func(d string) { r.add(Event{Kind: EventText, Text: d}) },
		OnThinking: func(c string, complete bool) {
			r.add(Event{Kind: EventThinking, Text: c, Complete: complete})
		},
		OnToolArgStart: func(id, name string) {
			r.add(Event{Kind: EventToolArgStart, ToolCallID: id, ToolName: name})
		},
		OnToolArgDelta: func(id, d string) { r.add(Event{Kind: EventToolArgDelta, ToolCallID: id, Text: d}) },
		OnToolArgEnd:   func(id string) { r.add(Event{Kind: EventToolArgEnd, ToolCallID: id}) },
	}
}

func (r *Recorder) add(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	r.once.Do(func() { close(r.first) })
}

// First returns a channel closed at the first recorded callback. The fake
// [Server] uses it to hold back the end of a stream until the adapter has
// forwarded something, which proves that deltas are streamed as they
// arrive rather than at the end.
func (r *Recorder) First() <-chan struct{} { return r.first }

// Events returns a copy of the recorded events.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Text returns the concatenated text deltas.
func (r *Recorder) Text() string { return r.join(EventText, "") }

// Thinking returns the concatenated thinking pieces.
func (r *Recorder) Thinking() string { return r.join(EventThinking, "") }

// Args returns the concatenated argument deltas of one tool call.
func (r *Recorder) Args(toolCallID string) string { return r.join(EventToolArgDelta, toolCallID) }

func (r *Recorder) join(kind EventKind, id string) string {
	var b strings.Builder
	for _, e := range r.Events() {
		if e.Kind == kind && (id == "" || e.ToolCallID == id) {
			b.WriteString(e.Text)
		}
	}
	return b.String()
}

// Count returns the number of recorded events of kind.
func (r *Recorder) Count(kind EventKind) int {
	n := 0
	for _, e := range r.Events() {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// CheckStream reports (with t.Errorf) every way the recorded callbacks
// disagree with the result a successful GenerateStep returned:
//
//   - the text deltas concatenate to res.Content;
//   - the thinking pieces concatenate to res.Thinking's content, and none
//     claims to be a complete block (adapters stream pieces);
//   - every tool call's arguments are valid JSON, and a call whose
//     arguments were streamed got exactly one start (with its name) before
//     its deltas and exactly one end after them, its deltas concatenating
//     to its arguments (an empty concatenation stands for {}, and streamed
//     text that is not valid JSON may be carried as a JSON string holding
//     it, the adapters' encoding of a model's broken arguments);
//   - no argument event names a call absent from the result.
func CheckStream(t testing.TB, rec *Recorder, res helix.StepResult) {
	t.Helper()
	if got := rec.Text(); got != res.Content {
		t.Errorf("text deltas concatenate to %q, but the result's content is %q", got, res.Content)
	}
	thinking := ""
	if res.Thinking != nil {
		thinking = res.Thinking.Content
	}
	if got := rec.Thinking(); got != thinking {
		t.Errorf("thinking pieces concatenate to %q, but the result's thinking is %q", got, thinking)
	}
	for _, e := range rec.Events() {
		if e.Kind == EventThinking && e.Complete {
			t.Errorf("thinking callback with complete=true (%q): adapters forward incremental pieces", e.Text)
		}
	}
	calls := map[string]helix.ToolCall{}
	for _, c := range res.ToolCalls {
		if !json.Valid(c.Arguments) {
			t.Errorf("tool call %s (%s) has invalid JSON arguments %q", c.ID, c.Name, c.Arguments)
		}
		calls[c.ID] = c
	}
	type state struct {
		started, ended int
		deltaAfterEnd  bool
		deltaBefore    bool
	}
	states := map[string]*state{}
	for _, e := range rec.Events() {
		switch e.Kind {
		case EventToolArgStart, EventToolArgDelta, EventToolArgEnd:
		default:
			continue
		}
		st := states[e.ToolCallID]
		if st == nil {
			st = &state{}
			states[e.ToolCallID] = st
		}
		call, ok := calls[e.ToolCallID]
		if !ok {
			t.Errorf("%s event for tool call %q, which is not in the result", e.Kind, e.ToolCallID)
			continue
		}
		switch e.Kind {
		case EventToolArgStart:
			st.started++
			if e.ToolName != call.Name {
				t.Errorf("tool_arg_start for %s names %q, the result's call is %q", e.ToolCallID, e.ToolName, call.Name)
			}
		case EventToolArgDelta:
			if st.started == 0 {
				st.deltaBefore = true
			}
			if st.ended > 0 {
				st.deltaAfterEnd = true
			}
		case EventToolArgEnd:
			st.ended++
		}
	}
	for id, st := range states {
		if _, ok := calls[id]; !ok {
			continue
		}
		if st.started != 1 || st.ended != 1 || st.deltaBefore || st.deltaAfterEnd {
			t.Errorf("tool call %s: %d starts, %d ends, delta before start %t, delta after end %t; want one start, deltas, one end",
				id, st.started, st.ended, st.deltaBefore, st.deltaAfterEnd)
			continue
		}
		streamed := rec.Args(id)
		if strings.TrimSpace(streamed) == "" {
			streamed = "{}"
		}
		var text string
		if json.Unmarshal(calls[id].Arguments, &text) == nil && text == streamed && !json.Valid([]byte(streamed)) {
			continue // invalid JSON arguments, carried as a JSON string
		}
		if !JSONEqual(streamed, string(calls[id].Arguments)) {
			t.Errorf("tool call %s: streamed arguments %q differ from the result's %q", id, streamed, calls[id].Arguments)
		}
	}
}

// JSONEqual reports whether a and b are the same JSON value (object key
// order and whitespace aside). Invalid JSON is equal to nothing.
func JSONEqual(a, b string) bool {
	var va, vb any
	if json.Unmarshal([]byte(a), &va) != nil || json.Unmarshal([]byte(b), &vb) != nil {
		return false
	}
	ca, _ := json.Marshal(va)
	cb, _ := json.Marshal(vb)
	return string(ca) == string(cb)
}

func describeEvents(events []Event) string {
	var b strings.Builder
	for i, e := range events {
		if i > 0 {
			b.WriteString(", ")
		}
		switch e.Kind {
		case EventToolArgStart:
			fmt.Fprintf(&b, "%s(%s,%s)", e.Kind, e.ToolCallID, e.ToolName)
		case EventToolArgEnd:
			fmt.Fprintf(&b, "%s(%s)", e.Kind, e.ToolCallID)
		default:
			fmt.Fprintf(&b, "%s(%q)", e.Kind, e.Text)
		}
	}
	return b.String()
}
