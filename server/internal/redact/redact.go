// Package redact keeps the engine's internal error text from the clients of
// package server and server/aisdk: both routes (GET /sse and the chat
// stream) pass every chunk through [Chunk] before it leaves the process,
// so a failure is told the same way wherever a client reads it.
//
// A failure with code internal_error (helix.CodeInternal) carries the
// engine's own error text: a database error with its SQL, an agent missing
// from the engine, a hook's error. The engine logs it; clients read a
// generic message instead. Failures with other codes carry texts written
// for the user (a provider's rate limit, a tool's own error, a denial) and
// pass unchanged.
package redact

import helix "github.com/helix-agents/helix-dbos"

// Messages that replace an internal failure's text.
const (
	// RunFailure replaces the text of a run's internal failure (its error
	// chunk, the fail event, the status's error).
	RunFailure = "the run failed on an internal error (the engine logged the cause); the session can be run again"
	// ToolFailure replaces the text of a tool call's internal failure (its
	// tool_end chunk); the run goes on.
	ToolFailure = "the tool call failed on an internal error (the engine logged the cause)"
)

// Internal reports whether a failure's code marks the engine's own error
// text, which must not reach a client.
func Internal(code string) bool { return code == helix.CodeInternal }

// Chunk returns a copy of c with an internal failure's text replaced, or
// nil when c carries none (c itself is never modified: it may be shared).
// It covers the chunks that carry an error code: error chunks (code
// internal_error, in Code or in ErrorDetail.Code) and tool_end chunks
// (ErrorCode internal_error).
func Chunk(c helix.Chunk) helix.Chunk {
	switch ch := c.(type) {
	case *helix.ErrorChunk:
		if !Internal(ch.Code) && (ch.ErrorDetail == nil || !Internal(ch.ErrorDetail.Code)) {
			return nil
		}
		cp := *ch
		cp.Error = RunFailure
		if ch.ErrorDetail != nil {
			d := *ch.ErrorDetail
			d.Message, d.Cause = RunFailure, ""
			cp.ErrorDetail = &d
		}
		return &cp
	case *helix.ToolEndChunk:
		if !Internal(ch.ErrorCode) {
			return nil
		}
		cp := *ch
		cp.Error = ToolFailure
		return &cp
	}
	return nil
}

// Or returns Chunk(c), or c itself when it needs no redaction.
func Or(c helix.Chunk) helix.Chunk {
	if r := Chunk(c); r != nil {
		return r
	}
	return c
}
