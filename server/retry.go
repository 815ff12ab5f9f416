package server

import (
	"context"
	"errors"
	"net/http"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/store"
)

// RetryRequest is the body of POST /retry.
type RetryRequest struct {
	// SessionID is a failed or interrupted root session.
	SessionID string `json:"sessionId"`
	// CheckpointID is the checkpoint to go back to; default the latest.
	CheckpointID string `json:"checkpointId,omitempty"`
	// FromStart retries from the session's first input instead of a
	// checkpoint (CheckpointID must then be empty).
	FromStart bool `json:"fromStart,omitempty"`
	// Message, when set, is appended as a user message before the run.
	Message string `json:"message,omitempty"`
}

// BranchRequest is the body of POST /branch.
type BranchRequest struct {
	// SessionID is the root session to branch from (any status).
	SessionID string `json:"sessionId"`
	// CheckpointID is the checkpoint the new session starts from; default
	// the source's latest.
	CheckpointID string `json:"checkpointId,omitempty"`
	// NewSessionID names the new session (1–200 of [A-Za-z0-9-_.:]);
	// default a new UUIDv7.
	NewSessionID string `json:"newSessionId,omitempty"`
	// Message, when set, is appended as a user message before the new
	// session's first step.
	Message string `json:"message,omitempty"`
}

// handleRetry runs a failed or interrupted session again from a checkpoint
// (Engine.Retry).
func (s *Server) handleRetry(w http.ResponseWriter, r *http.Request) *apiError {
	var req RetryRequest
	if err := decodeBody(r, w, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	if req.FromStart && req.CheckpointID != "" {
		return newError(http.StatusBadRequest, CodeInvalidRequest, "give checkpointId or fromStart, not both")
	}
	st, apiErr := s.rootSessionServed(r, req.SessionID, req.CheckpointID)
	if apiErr != nil {
		return apiErr
	}
	opts := &engine.RetryOptions{CheckpointID: req.CheckpointID, Message: req.Message}
	if req.FromStart {
		opts.Mode = engine.RetryFromStart
	}
	ctx, cancel := s.operationContext(r)
	defer cancel()
	h, err := s.eng.Retry(ctx, st.SessionID, opts)
	if err != nil {
		return engineError(err, st.SessionID)
	}
	s.log.Info().Str("event", "session.retried").Str("requestId", requestIDFrom(r.Context())).Str("sessionId", h.SessionID).
		Str("runId", h.RunID).Msg("retry started over HTTP")
	writeJSON(w, http.StatusAccepted, RunResponse{SessionID: h.SessionID, RunID: h.RunID, StreamURL: s.streamURL(r, h)})
	return nil
}

// handleBranch starts a new session, owned by the caller, from a
// checkpoint of one of its sessions (Engine.Execute with a Branch).
func (s *Server) handleBranch(w http.ResponseWriter, r *http.Request) *apiError {
	var req BranchRequest
	if err := decodeBody(r, w, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	if req.NewSessionID != "" {
		if err := validSessionID(req.NewSessionID); err != nil {
			return newError(http.StatusBadRequest, CodeInvalidRequest, "newSessionId: %s", err.Error())
		}
	}
	st, apiErr := s.rootSessionServed(r, req.SessionID, req.CheckpointID)
	if apiErr != nil {
		return apiErr
	}
	principal, _ := PrincipalFromContext(r.Context())
	ctx, cancel := s.operationContext(r)
	defer cancel()
	h, err := s.eng.Execute(ctx, s.agents[st.AgentType], engine.Input{Message: req.Message}, &engine.ExecuteOptions{
		SessionID: req.NewSessionID, UserID: string(principal),
		Branch: &engine.Branch{FromSessionID: st.SessionID, CheckpointID: req.CheckpointID}})
	if err != nil {
		return engineError(err, req.NewSessionID)
	}
	s.log.Info().Str("event", "session.branched").Str("requestId", requestIDFrom(r.Context())).Str("sessionId", h.SessionID).
		Str("fromSessionId", st.SessionID).Str("runId", h.RunID).Msg("branch started over HTTP")
	writeJSON(w, http.StatusAccepted, RunResponse{SessionID: h.SessionID, RunID: h.RunID, StreamURL: s.streamURL(r, h)})
	return nil
}

// rootSessionServed loads the session of a /retry or /branch request: it
// must be visible to the caller, a root session, of an agent this server
// runs, and checkpointID (when set) one of its checkpoints.
func (s *Server) rootSessionServed(r *http.Request, sessionID, checkpointID string) (*store.SessionState, *apiError) {
	st, apiErr := s.requestedSession(r, sessionID)
	if apiErr != nil {
		return nil, apiErr
	}
	if !st.IsRoot() {
		return nil, newError(http.StatusBadRequest, helix.SubmissionNotRoot,
			"session %q is a sub-agent session: act on its root session %q", st.SessionID, st.RootSessionID)
	}
	if s.agents[st.AgentType] == nil {
		return nil, s.unservedAgent(st, "use a server configured with that agent")
	}
	if checkpointID != "" {
		if apiErr := s.checkpointOf(r.Context(), st.SessionID, checkpointID); apiErr != nil {
			return nil, apiErr
		}
	}
	return st, nil
}

// checkpointOf answers 404 checkpoint_not_found unless checkpointID is a
// checkpoint of the session.
func (s *Server) checkpointOf(ctx context.Context, sessionID, checkpointID string) *apiError {
	cp, err := s.eng.Checkpoint(ctx, checkpointID)
	switch {
	case errors.Is(err, helix.ErrNotFound) || (err == nil && cp.SessionID != sessionID):
		return newError(http.StatusNotFound, CodeCheckpointNotFound,
			"checkpoint %q is not a checkpoint of session %q: pick one the inspector lists for the session", checkpointID, sessionID)
	case err != nil:
		return internalError(err)
	}
	return nil
}
