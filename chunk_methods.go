// Code generated from the chunkKinds table in chunk.go; DO NOT EDIT.

package helix

// ChunkType returns ChunkTextDelta.
func (*TextDeltaChunk) ChunkType() ChunkType { return ChunkTextDelta }

// MarshalJSON adds the "type" discriminator.
func (c TextDeltaChunk) MarshalJSON() ([]byte, error) {
	type plain TextDeltaChunk
	return marshalTyped(ChunkTextDelta, plain(c))
}

// ChunkType returns ChunkThinking.
func (*ThinkingChunk) ChunkType() ChunkType { return ChunkThinking }

// MarshalJSON adds the "type" discriminator.
func (c ThinkingChunk) MarshalJSON() ([]byte, error) {
	type plain ThinkingChunk
	return marshalTyped(ChunkThinking, plain(c))
}

// ChunkType returns ChunkToolArgStreamStart.
func (*ToolArgStreamStartChunk) ChunkType() ChunkType { return ChunkToolArgStreamStart }

// MarshalJSON adds the "type" discriminator.
func (c ToolArgStreamStartChunk) MarshalJSON() ([]byte, error) {
	type plain ToolArgStreamStartChunk
	return marshalTyped(ChunkToolArgStreamStart, plain(c))
}

// ChunkType returns ChunkToolArgStreamDelta.
func (*ToolArgStreamDeltaChunk) ChunkType() ChunkType { return ChunkToolArgStreamDelta }

// MarshalJSON adds the "type" discriminator.
func (c ToolArgStreamDeltaChunk) MarshalJSON() ([]byte, error) {
	type plain ToolArgStreamDeltaChunk
	return marshalTyped(ChunkToolArgStreamDelta, plain(c))
}

// ChunkType returns ChunkToolArgStreamEnd.
func (*ToolArgStreamEndChunk) ChunkType() ChunkType { return ChunkToolArgStreamEnd }

// MarshalJSON adds the "type" discriminator.
func (c ToolArgStreamEndChunk) MarshalJSON() ([]byte, error) {
	type plain ToolArgStreamEndChunk
	return marshalTyped(ChunkToolArgStreamEnd, plain(c))
}

// ChunkType returns ChunkToolStart.
func (*ToolStartChunk) ChunkType() ChunkType { return ChunkToolStart }

// MarshalJSON adds the "type" discriminator.
func (c ToolStartChunk) MarshalJSON() ([]byte, error) {
	type plain ToolStartChunk
	return marshalTyped(ChunkToolStart, plain(c))
}

// ChunkType returns ChunkToolEnd.
func (*ToolEndChunk) ChunkType() ChunkType { return ChunkToolEnd }

// MarshalJSON adds the "type" discriminator.
func (c ToolEndChunk) MarshalJSON() ([]byte, error) {
	type plain ToolEndChunk
	return marshalTyped(ChunkToolEnd, plain(c))
}

// ChunkType returns ChunkToolApprovalRequest.
func (*ToolApprovalRequestChunk) ChunkType() ChunkType { return ChunkToolApprovalRequest }

// MarshalJSON adds the "type" discriminator.
func (c ToolApprovalRequestChunk) MarshalJSON() ([]byte, error) {
	type plain ToolApprovalRequestChunk
	return marshalTyped(ChunkToolApprovalRequest, plain(c))
}

// ChunkType returns ChunkToolApprovalResponse.
func (*ToolApprovalResponseChunk) ChunkType() ChunkType { return ChunkToolApprovalResponse }

// MarshalJSON adds the "type" discriminator.
func (c ToolApprovalResponseChunk) MarshalJSON() ([]byte, error) {
	type plain ToolApprovalResponseChunk
	return marshalTyped(ChunkToolApprovalResponse, plain(c))
}

// ChunkType returns ChunkToolInputError.
func (*ToolInputErrorChunk) ChunkType() ChunkType { return ChunkToolInputError }

// MarshalJSON adds the "type" discriminator.
func (c ToolInputErrorChunk) MarshalJSON() ([]byte, error) {
	type plain ToolInputErrorChunk
	return marshalTyped(ChunkToolInputError, plain(c))
}

// ChunkType returns ChunkToolOutputError.
func (*ToolOutputErrorChunk) ChunkType() ChunkType { return ChunkToolOutputError }

// MarshalJSON adds the "type" discriminator.
func (c ToolOutputErrorChunk) MarshalJSON() ([]byte, error) {
	type plain ToolOutputErrorChunk
	return marshalTyped(ChunkToolOutputError, plain(c))
}

// ChunkType returns ChunkSubAgentStart.
func (*SubAgentStartChunk) ChunkType() ChunkType { return ChunkSubAgentStart }

// MarshalJSON adds the "type" discriminator.
func (c SubAgentStartChunk) MarshalJSON() ([]byte, error) {
	type plain SubAgentStartChunk
	return marshalTyped(ChunkSubAgentStart, plain(c))
}

// ChunkType returns ChunkSubAgentEnd.
func (*SubAgentEndChunk) ChunkType() ChunkType { return ChunkSubAgentEnd }

// MarshalJSON adds the "type" discriminator.
func (c SubAgentEndChunk) MarshalJSON() ([]byte, error) {
	type plain SubAgentEndChunk
	return marshalTyped(ChunkSubAgentEnd, plain(c))
}

// ChunkType returns ChunkCustom.
func (*CustomEventChunk) ChunkType() ChunkType { return ChunkCustom }

// MarshalJSON adds the "type" discriminator.
func (c CustomEventChunk) MarshalJSON() ([]byte, error) {
	type plain CustomEventChunk
	return marshalTyped(ChunkCustom, plain(c))
}

// ChunkType returns ChunkStatePatch.
func (*StatePatchChunk) ChunkType() ChunkType { return ChunkStatePatch }

// MarshalJSON adds the "type" discriminator.
func (c StatePatchChunk) MarshalJSON() ([]byte, error) {
	type plain StatePatchChunk
	return marshalTyped(ChunkStatePatch, plain(c))
}

// ChunkType returns ChunkError.
func (*ErrorChunk) ChunkType() ChunkType { return ChunkError }

// MarshalJSON adds the "type" discriminator.
func (c ErrorChunk) MarshalJSON() ([]byte, error) {
	type plain ErrorChunk
	return marshalTyped(ChunkError, plain(c))
}

// ChunkType returns ChunkOutput.
func (*OutputChunk) ChunkType() ChunkType { return ChunkOutput }

// MarshalJSON adds the "type" discriminator.
func (c OutputChunk) MarshalJSON() ([]byte, error) {
	type plain OutputChunk
	return marshalTyped(ChunkOutput, plain(c))
}

// ChunkType returns ChunkSourceURL.
func (*SourceURLChunk) ChunkType() ChunkType { return ChunkSourceURL }

// MarshalJSON adds the "type" discriminator.
func (c SourceURLChunk) MarshalJSON() ([]byte, error) {
	type plain SourceURLChunk
	return marshalTyped(ChunkSourceURL, plain(c))
}

// ChunkType returns ChunkSourceDocument.
func (*SourceDocumentChunk) ChunkType() ChunkType { return ChunkSourceDocument }

// MarshalJSON adds the "type" discriminator.
func (c SourceDocumentChunk) MarshalJSON() ([]byte, error) {
	type plain SourceDocumentChunk
	return marshalTyped(ChunkSourceDocument, plain(c))
}

// ChunkType returns ChunkStepStart.
func (*StepStartChunk) ChunkType() ChunkType { return ChunkStepStart }

// MarshalJSON adds the "type" discriminator.
func (c StepStartChunk) MarshalJSON() ([]byte, error) {
	type plain StepStartChunk
	return marshalTyped(ChunkStepStart, plain(c))
}

// ChunkType returns ChunkStepEnd.
func (*StepEndChunk) ChunkType() ChunkType { return ChunkStepEnd }

// MarshalJSON adds the "type" discriminator.
func (c StepEndChunk) MarshalJSON() ([]byte, error) {
	type plain StepEndChunk
	return marshalTyped(ChunkStepEnd, plain(c))
}

// ChunkType returns ChunkFile.
func (*FileChunk) ChunkType() ChunkType { return ChunkFile }

// MarshalJSON adds the "type" discriminator.
func (c FileChunk) MarshalJSON() ([]byte, error) {
	type plain FileChunk
	return marshalTyped(ChunkFile, plain(c))
}

// ChunkType returns ChunkRunInterrupted.
func (*RunInterruptedChunk) ChunkType() ChunkType { return ChunkRunInterrupted }

// MarshalJSON adds the "type" discriminator.
func (c RunInterruptedChunk) MarshalJSON() ([]byte, error) {
	type plain RunInterruptedChunk
	return marshalTyped(ChunkRunInterrupted, plain(c))
}

// ChunkType returns ChunkRunResumed.
func (*RunResumedChunk) ChunkType() ChunkType { return ChunkRunResumed }

// MarshalJSON adds the "type" discriminator.
func (c RunResumedChunk) MarshalJSON() ([]byte, error) {
	type plain RunResumedChunk
	return marshalTyped(ChunkRunResumed, plain(c))
}

// ChunkType returns ChunkRunPaused.
func (*RunPausedChunk) ChunkType() ChunkType { return ChunkRunPaused }

// MarshalJSON adds the "type" discriminator.
func (c RunPausedChunk) MarshalJSON() ([]byte, error) {
	type plain RunPausedChunk
	return marshalTyped(ChunkRunPaused, plain(c))
}

// ChunkType returns ChunkRunQueued.
func (*RunQueuedChunk) ChunkType() ChunkType { return ChunkRunQueued }

// MarshalJSON adds the "type" discriminator.
func (c RunQueuedChunk) MarshalJSON() ([]byte, error) {
	type plain RunQueuedChunk
	return marshalTyped(ChunkRunQueued, plain(c))
}

// ChunkType returns ChunkExecutorSuperseded.
func (*ExecutorSupersededChunk) ChunkType() ChunkType { return ChunkExecutorSuperseded }

// MarshalJSON adds the "type" discriminator.
func (c ExecutorSupersededChunk) MarshalJSON() ([]byte, error) {
	type plain ExecutorSupersededChunk
	return marshalTyped(ChunkExecutorSuperseded, plain(c))
}

// ChunkType returns ChunkCheckpointCreated.
func (*CheckpointCreatedChunk) ChunkType() ChunkType { return ChunkCheckpointCreated }

// MarshalJSON adds the "type" discriminator.
func (c CheckpointCreatedChunk) MarshalJSON() ([]byte, error) {
	type plain CheckpointCreatedChunk
	return marshalTyped(ChunkCheckpointCreated, plain(c))
}

// ChunkType returns ChunkStepCommitted.
func (*StepCommittedChunk) ChunkType() ChunkType { return ChunkStepCommitted }

// MarshalJSON adds the "type" discriminator.
func (c StepCommittedChunk) MarshalJSON() ([]byte, error) {
	type plain StepCommittedChunk
	return marshalTyped(ChunkStepCommitted, plain(c))
}

// ChunkType returns ChunkStepDiscarded.
func (*StepDiscardedChunk) ChunkType() ChunkType { return ChunkStepDiscarded }

// MarshalJSON adds the "type" discriminator.
func (c StepDiscardedChunk) MarshalJSON() ([]byte, error) {
	type plain StepDiscardedChunk
	return marshalTyped(ChunkStepDiscarded, plain(c))
}

// ChunkType returns ChunkStreamResync.
func (*StreamResyncChunk) ChunkType() ChunkType { return ChunkStreamResync }

// MarshalJSON adds the "type" discriminator.
func (c StreamResyncChunk) MarshalJSON() ([]byte, error) {
	type plain StreamResyncChunk
	return marshalTyped(ChunkStreamResync, plain(c))
}

// ChunkType returns ChunkSuspensionMarker.
func (*SuspensionMarkerChunk) ChunkType() ChunkType { return ChunkSuspensionMarker }

// MarshalJSON adds the "type" discriminator.
func (c SuspensionMarkerChunk) MarshalJSON() ([]byte, error) {
	type plain SuspensionMarkerChunk
	return marshalTyped(ChunkSuspensionMarker, plain(c))
}

// ChunkType returns ChunkStreamEnd.
func (*StreamEnd) ChunkType() ChunkType { return ChunkStreamEnd }

// MarshalJSON adds the "type" discriminator.
func (c StreamEnd) MarshalJSON() ([]byte, error) {
	type plain StreamEnd
	return marshalTyped(ChunkStreamEnd, plain(c))
}
