package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// chunkPrinter prints a stream one readable line per chunk: sequence, type,
// (optionally) agent, and a summary. Consecutive deltas of one kind (text,
// thinking, streamed tool arguments) are coalesced onto one line that grows
// as they arrive, so a live stream reads like the model's answer.
type chunkPrinter struct {
	w io.Writer
	// prefix starts every line (the demo indents the stream).
	prefix string
	// showAgent adds the agent column (the session ID of the emitting
	// agent, and its type).
	showAgent bool
	// maxValue truncates JSON values to this many characters (0: never).
	maxValue int
	// width, when set, soft-wraps coalesced text at this column, under
	// the detail column.
	width int
	// session is the streamed session: the agent column shows only the
	// agent type for its own chunks, and adds the ID for a sub-agent's.
	session string

	open    string // coalescing key of the line still open, "" when none
	indent  string // whitespace under the detail column, for wrapped text
	col     int    // column of the cursor on the open line
	printed int    // chunks printed
}

// chunk prints one stored chunk.
func (p *chunkPrinter) chunk(c store.StoredChunk) {
	p.printed++
	if key, delta, ok := coalesce(c.Chunk); ok {
		if key == p.open {
			p.text(delta)
			return
		}
		p.endLine()
		p.header(c)
		p.text(delta)
		p.open = key
		return
	}
	p.endLine()
	p.header(c)
	fmt.Fprintln(p.w, p.wrap(p.detail(c.Chunk)))
}

// line ends an open coalesced line and prints a free line (a note between
// chunks).
func (p *chunkPrinter) line(format string, args ...any) {
	p.endLine()
	fmt.Fprintf(p.w, p.prefix+format+"\n", args...)
}

// endLine terminates a coalesced line that is still open.
func (p *chunkPrinter) endLine() {
	if p.open != "" {
		fmt.Fprintln(p.w)
		p.open = ""
	}
}

func (p *chunkPrinter) header(c store.StoredChunk) {
	h := fmt.Sprintf("%s%5d  %-20s", p.prefix, c.Sequence, c.Chunk.ChunkType())
	if p.showAgent {
		agent := "-"
		if b := c.Chunk.ChunkBase(); b != nil {
			agent = b.AgentType
			if b.AgentID != "" && b.AgentID != p.session {
				agent += " " + shortID(b.AgentID)
			}
		}
		h += fmt.Sprintf(" %-20s", agent)
	}
	h += " "
	p.col = utf8.RuneCountInString(h)
	p.indent = strings.Repeat(" ", p.col)
	fmt.Fprint(p.w, h)
}

// text writes coalesced text on the open line, soft-wrapped at width.
func (p *chunkPrinter) text(s string) {
	if p.width <= 0 {
		fmt.Fprint(p.w, p.wrap(s))
		return
	}
	for _, word := range strings.SplitAfter(s, " ") {
		if i := strings.LastIndexByte(word, '\n'); i >= 0 {
			fmt.Fprint(p.w, p.wrap(word))
			p.col = len(p.indent) + utf8.RuneCountInString(word[i+1:])
			continue
		}
		n := utf8.RuneCountInString(strings.TrimRight(word, " "))
		if p.col+n > p.width && p.col > len(p.indent) {
			fmt.Fprint(p.w, "\n"+p.indent)
			p.col = len(p.indent)
			word = strings.TrimLeft(word, " ")
		}
		fmt.Fprint(p.w, word)
		p.col += utf8.RuneCountInString(word)
	}
}

// wrap keeps multi-line text under the detail column.
func (p *chunkPrinter) wrap(s string) string {
	return strings.ReplaceAll(s, "\n", "\n"+p.indent)
}

// coalesce returns the key and text of a delta chunk.
func coalesce(c helix.Chunk) (key, delta string, ok bool) {
	switch v := c.(type) {
	case *helix.TextDeltaChunk:
		return fmt.Sprintf("text/%s/%d", v.AgentID, v.Step), v.Delta, true
	case *helix.ThinkingChunk:
		if !v.IsComplete {
			return fmt.Sprintf("thinking/%s/%d", v.AgentID, v.Step), v.Content, true
		}
	case *helix.ToolArgStreamDeltaChunk:
		return "args/" + v.AgentID + "/" + v.ToolCallID, v.Delta, true
	}
	return "", "", false
}

// detail summarizes a chunk other than a delta.
func (p *chunkPrinter) detail(c helix.Chunk) string {
	j := func(raw json.RawMessage) string { return compactJSON(raw, p.maxValue) }
	switch v := c.(type) {
	case *helix.StepStartChunk:
		return fmt.Sprintf("step %d", v.Step)
	case *helix.StepEndChunk:
		s := fmt.Sprintf("step %d · %s", v.Step, cmp.Or(v.FinishReason, "other"))
		if v.Usage != nil {
			s += fmt.Sprintf(" · %d in / %d out tokens", v.Usage.InputTokens, v.Usage.OutputTokens)
		}
		return s
	case *helix.ThinkingChunk:
		return v.Content
	case *helix.ToolArgStreamStartChunk:
		return fmt.Sprintf("%s (%s)", v.ToolName, v.ToolCallID)
	case *helix.ToolArgStreamEndChunk:
		return v.ToolCallID
	case *helix.ToolStartChunk:
		s := fmt.Sprintf("%s %s  (%s)", v.ToolName, j(v.Arguments), v.ToolCallID)
		if v.ProviderExecuted != nil && !*v.ProviderExecuted {
			s += " · client-executed: the run waits for its result"
		}
		return s
	case *helix.ToolEndChunk:
		if v.Error != "" {
			return fmt.Sprintf("%s ✗ %s%s", v.ToolName, v.Error, paren(v.ErrorCode))
		}
		return fmt.Sprintf("%s → %s", v.ToolName, j(v.Result))
	case *helix.ToolInputErrorChunk:
		return fmt.Sprintf("%s: %s", v.ToolName, v.Error)
	case *helix.ToolOutputErrorChunk:
		return fmt.Sprintf("%s: %s", v.ToolName, v.Error)
	case *helix.ToolApprovalRequestChunk:
		return fmt.Sprintf("approval requested for %s %s  (call %s)", v.ToolName, j(v.Input), v.ToolCallID)
	case *helix.ToolApprovalResponseChunk:
		decision := "denied"
		if v.Approved {
			decision = "approved"
		}
		s := fmt.Sprintf("%s %s  (call %s)", decision, v.ToolName, v.ToolCallID)
		if v.Reason != "" {
			s += ": " + v.Reason
		}
		return s
	case *helix.SubAgentStartChunk:
		return fmt.Sprintf("%s %s", v.SubAgentType, v.SubSessionID)
	case *helix.SubAgentEndChunk:
		return fmt.Sprintf("%s %s → %s", v.SubAgentType, v.SubSessionID, j(v.Result))
	case *helix.CustomEventChunk:
		return fmt.Sprintf("%s %s", v.EventName, j(v.Data))
	case *helix.StatePatchChunk:
		ops := make([]string, len(v.Patches))
		for i, op := range v.Patches {
			ops[i] = strings.TrimSpace(op.Op + " " + op.Path + " " + j(op.Value))
		}
		return truncate(strings.Join(ops, "; "), p.maxValue)
	case *helix.ErrorChunk:
		s := v.Error
		if v.Code != "" {
			s = v.Code + ": " + s
		}
		if v.Recoverable {
			s += " (recoverable)"
		}
		return s
	case *helix.OutputChunk:
		return j(v.Output)
	case *helix.SourceURLChunk:
		return strings.TrimSpace(v.URL + " " + v.Title)
	case *helix.SourceDocumentChunk:
		return v.Title
	case *helix.FileChunk:
		return strings.TrimSpace(v.MediaType + " " + v.Filename)
	case *helix.RunInterruptedChunk:
		s := "run " + shortID(v.RunID) + " interrupted" + paren(v.Reason)
		if v.CheckpointID != nil {
			s += " · checkpoint " + *v.CheckpointID
		}
		return s
	case *helix.RunResumedChunk:
		return fmt.Sprintf("run %s resumes after step %d (%s)", shortID(v.RunID), v.FromStepCount, v.Mode)
	case *helix.RunPausedChunk:
		return fmt.Sprintf("run %s paused: %s", shortID(v.RunID), v.Reason)
	case *helix.RunQueuedChunk:
		return fmt.Sprintf("run %s queued on %s%s", shortID(v.RunID), v.Queue, paren("partition "+v.PartitionKey))
	case *helix.ExecutorSupersededChunk:
		return v.Reason
	case *helix.CheckpointCreatedChunk:
		return fmt.Sprintf("%s (step %d)", v.CheckpointID, v.StepCount)
	case *helix.StepCommittedChunk:
		return fmt.Sprintf("step %d · checkpoint %s", v.Step, v.CheckpointID)
	case *helix.StepDiscardedChunk:
		return fmt.Sprintf("step %d: %s", v.Step, v.Reason)
	case *helix.StreamResyncChunk:
		return fmt.Sprintf("%s: chunks from sequence %d removed; back to checkpoint step %d (%d messages)",
			v.Reason, v.FromSequence, v.StepCount, v.MessageCount)
	case *helix.SuspensionMarkerChunk:
		return string(v.Kind)
	case *helix.StreamEnd:
		if len(v.FinalOutput) > 0 {
			return "final output " + j(v.FinalOutput)
		}
		return ""
	}
	b, _ := json.Marshal(c)
	return compactJSON(b, p.maxValue)
}

// compactJSON renders raw JSON on one line, truncated to max characters (0:
// no limit).
func compactJSON(raw json.RawMessage, max int) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	s := string(raw)
	if json.Compact(&b, raw) == nil {
		s = b.String()
	}
	return truncate(s, max)
}

func truncate(s string, max int) string {
	if max <= 0 || utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max-1]) + "…"
}

func paren(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// shortID abbreviates a long generated ID for a column.
func shortID(id string) string {
	if len(id) <= 24 {
		return id
	}
	return id[:8] + "…" + id[len(id)-8:]
}
