package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	helix "github.com/helix-agents/helix-dbos"
)

// StreamStore holds ordered, resumable event streams. Every chunk gets a
// per-stream sequence number, strictly increasing in commit order, so a
// reader that has seen sequence N continues exactly after N. Sequence numbers
// are never reused; cleanup leaves gaps.
type StreamStore interface {
	// CreateStream registers a stream. Idempotent: an existing stream is left
	// as it is.
	CreateStream(ctx context.Context, streamID string, opts *CreateStreamOptions) error

	// NewWriter returns a buffered writer for the stream (see Writer). The
	// stream must exist.
	NewWriter(streamID string, opts *WriterOptions) Writer

	// Append writes chunks synchronously, in order, in one statement, and
	// returns the sequence of the last one. It fails with
	// *helix.StreamNotActiveError on an ended or failed stream. Not
	// idempotent; flush any Writer of the same stream first to keep order.
	Append(ctx context.Context, streamID string, chunks []ChunkWrite) (int64, error)

	// EndStream marks the stream ended and appends a stream_end chunk with
	// the final output. Idempotent: ending an ended stream does nothing.
	EndStream(ctx context.Context, streamID string, finalOutput json.RawMessage) error

	// FailStream marks the stream failed; readers return
	// *helix.StreamFailedError after the last chunk. Idempotent.
	FailStream(ctx context.Context, streamID, message string) error

	// ReactivateStream makes an ended or failed stream active again (a new
	// turn of a multi-turn session). Idempotent.
	ReactivateStream(ctx context.Context, streamID string) error

	// CleanupToStep removes the chunks of steps after step whose sequence is
	// above minSequence (pass the resumed run's start sequence so earlier
	// turns are protected, or 0 to clean every turn). Readers attached
	// before the cleanup whose unread chunks were removed get
	// *helix.StreamTruncatedError. Idempotent: a repeat removes nothing.
	CleanupToStep(ctx context.Context, streamID string, step int, minSequence int64) (CleanupResult, error)

	// ResetStream removes every chunk and makes the stream active again;
	// sequence numbers continue from where they were. Attached readers get
	// *helix.StreamTruncatedError. Idempotent.
	ResetStream(ctx context.Context, streamID string) error

	// GetStreamInfo describes the stream. Read-only.
	GetStreamInfo(ctx context.Context, streamID string) (*StreamInfo, error)

	// ReadChunks returns up to limit chunks with a sequence above
	// afterSequence, without waiting. Read-only.
	ReadChunks(ctx context.Context, streamID string, afterSequence int64, limit int) ([]StoredChunk, error)

	// NewReader returns a resumable reader starting after
	// opts.FromSequence. It blocks for new chunks and ends at stream_end
	// (io.EOF after yielding it) or with *helix.StreamFailedError.
	NewReader(ctx context.Context, streamID string, opts *ReaderOptions) (Reader, error)
}

// CreateStreamOptions refine CreateStream.
type CreateStreamOptions struct {
	// OwnerSessionID ties the stream's lifetime to a session: deleting the
	// session deletes the stream.
	OwnerSessionID string
}

// WriterOptions tag every chunk a writer writes, for cleanup and auditing.
type WriterOptions struct {
	RunID   string
	Attempt int
	// Guard, when set, is called before each batch holding this writer's
	// chunks is written; an error drops those chunks and fails the writer
	// with it. The engine fences a step's stream writes with it: a process
	// whose session was taken over writes none of its late chunks.
	Guard func(ctx context.Context) error
	// Fence, when set, ties every chunk of this writer to one execution of
	// a workflow (see Fence): the statement that writes a batch drops the
	// chunks whose fence no longer holds and fails the writer with
	// ErrFenced. Guard is asked before the batch is sent; Fence is checked
	// in the statement itself, so no write can land after the workflow
	// was taken over, however long the writer paused in between.
	Fence *Fence
}

// Fence ties a write to one execution of a DBOS workflow: the write lands
// only while workflow WorkflowID is owned by the execution whose DBOS owner
// token (dbos.workflow_status.owner_xid) is Owner. The writing statement
// locks the workflow's status row (FOR SHARE) and compares the token on
// its latest version, so a takeover that re-enqueues the workflow either
// waits for the write to commit (the new execution then sees, and cleans
// up, what it wrote) or makes it write nothing.
type Fence struct {
	WorkflowID string
	Owner      string
}

// ErrFenced is matched (errors.Is) by the error of a write whose Fence no
// longer holds: the workflow was taken over (or cancelled, or ended), and
// nothing of the write landed. The execution that wrote it must stop: its
// workflow continues elsewhere.
var ErrFenced = errors.New("store: the workflow is no longer owned by the execution that wrote this (taken over, cancelled or ended): nothing was written")

// ChunkWrite is one chunk to append with its tags. The chunk's step (from its
// base fields) is stored alongside it for CleanupToStep. Writing a chunk whose
// base Timestamp is zero stamps it with the current time.
type ChunkWrite struct {
	Chunk   helix.Chunk
	RunID   string
	Attempt int
	// Fence, when set, writes the chunk only while its workflow execution
	// owns its workflow (see Fence); otherwise the append fails with
	// ErrFenced and writes none of its chunks of that fence.
	Fence *Fence
}

// Writer appends chunks to one stream. Deltas (text, streamed thinking,
// streamed tool arguments) are coalesced with other pending chunks into
// batched inserts: Write returns once they are queued, and a failure surfaces
// on a later Write, Flush or Close. Any other chunk is durable when Write
// returns. Chunks of one writer keep their order, with no gap: once a
// write failed, the writer writes nothing more (the chunks it had queued
// are dropped, and every later call returns the failure). Writers are safe
// for concurrent use.
type Writer interface {
	Write(ctx context.Context, chunk helix.Chunk) error
	// Queue queues any chunk the way deltas are: it goes out with the next
	// batch, at most the flush interval later, and is durable once a later
	// Flush or Close returns. For a chunk that may wait a few milliseconds
	// to share a statement with the chunks that follow it (a step_start
	// before a fast model's answer).
	Queue(ctx context.Context, chunk helix.Chunk) error
	// Flush waits until every chunk written so far is durable.
	Flush(ctx context.Context) error
	// Close flushes and closes the writer (not the stream).
	Close(ctx context.Context) error
}

// ReaderOptions position a reader.
type ReaderOptions struct {
	// FromSequence is the last sequence the caller has already seen (an SSE
	// Last-Event-ID); reading starts after it. 0 reads from the beginning.
	FromSequence int64
}

// Reader reads a stream in sequence order, waiting for new chunks.
type Reader interface {
	// Next returns the next chunk, waiting for one if needed. It returns
	// io.EOF after the stream_end chunk (or when the stream ended without
	// one), *helix.StreamFailedError after the last chunk of a failed stream,
	// *helix.StreamTruncatedError when unread chunks were removed, or the
	// context's error.
	Next(ctx context.Context) (StoredChunk, error)
	// Sequence returns the sequence of the last chunk returned.
	Sequence() int64
	// Close releases the reader. Idempotent.
	Close() error
}

// StoredChunk is a chunk as stored, with its sequence number and tags. Raw is
// the chunk's JSON exactly as stored, for transports that forward it.
type StoredChunk struct {
	StreamID  string
	Sequence  int64
	RunID     string
	Step      int
	Attempt   int
	Chunk     helix.Chunk
	Raw       json.RawMessage
	CreatedAt time.Time
}

// StreamInfo describes a stream.
type StreamInfo struct {
	StreamID       string             `json:"streamId"`
	OwnerSessionID string             `json:"ownerSessionId,omitempty"`
	Status         helix.StreamStatus `json:"status"`
	LatestSequence int64              `json:"latestSequence"`
	ChunkCount     int64              `json:"chunkCount"`
	FinalOutput    json.RawMessage    `json:"finalOutput,omitempty"`
	Error          string             `json:"error,omitempty"`
	// TruncationEpoch counts cleanups and resets that removed chunks.
	TruncationEpoch int       `json:"truncationEpoch"`
	CreatedAt       time.Time `json:"createdAt"`
	UpdatedAt       time.Time `json:"updatedAt"`
}

// CleanupResult reports what CleanupToStep removed. When Removed is 0 the
// sequence fields are 0.
type CleanupResult struct {
	Removed int
	// MinSequence and MaxSequence bound the removed chunks.
	MinSequence int64
	MaxSequence int64
	// AtSequence is the stream's latest sequence at the time of cleanup.
	AtSequence int64
}
