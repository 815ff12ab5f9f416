package server

import (
	"net/http"

	"github.com/helix-agents/helix-dbos/engine"
)

// DeleteRequest is the body of POST /delete.
type DeleteRequest struct {
	// SessionID is the root session to delete with its whole tree.
	SessionID string `json:"sessionId"`
	// Force aborts a run in progress and waits for its workflows to end
	// before deleting (engine.DeleteOptions.Force).
	Force bool `json:"force,omitempty"`
}

// DeleteResponse answers POST /delete (200): what was deleted.
type DeleteResponse struct {
	SessionID string `json:"sessionId"`
	// Status is "deleted".
	Status string `json:"status"`
	// Sessions counts the sessions deleted: the root, its sub-agents and
	// companions.
	Sessions int64 `json:"sessions"`
	// Workflows counts the DBOS workflows whose rows were deleted.
	Workflows int `json:"workflows"`
	// Rows counts the deleted rows per table ("helix.messages", …).
	Rows map[string]int64 `json:"rows"`
}

// handleDelete deletes a root session of the caller with its whole tree.
// A session the caller cannot see, a missing one and one deleted before
// all answer 404 session_not_found (the same answer, so other principals'
// sessions cannot be probed).
func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) *apiError {
	var req DeleteRequest
	if err := decodeBody(r, w, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	st, apiErr := s.requestedSession(r, req.SessionID)
	if apiErr != nil {
		return apiErr
	}
	ctx, cancel := s.operationContext(r)
	defer cancel()
	stats, err := s.eng.DeleteSession(ctx, st.SessionID, &engine.DeleteOptions{Force: req.Force})
	if err != nil {
		return engineError(err, st.SessionID)
	}
	if len(stats.Deleted) == 0 { // deleted by someone else meanwhile
		return sessionNotFound(st.SessionID)
	}
	writeJSON(w, http.StatusOK, DeleteResponse{SessionID: st.SessionID, Status: "deleted", Sessions: stats.Sessions,
		Workflows: stats.Workflows, Rows: stats.Rows})
	return nil
}
