package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// FeedbackRequest is the body of POST /v1/feedback: a quality score for a conversation, from a
// user's rating or an evaluator.
type FeedbackRequest struct {
	// SessionID is the conversation's session key (as the gateway extracted it).
	SessionID string `json:"session_id"`
	// Score in [0, 1].
	Score *float64 `json:"score"`
	// Rollout ("namespace/name") limits the lookup; empty tries every rollout.
	Rollout string `json:"rollout,omitempty"`
}

// FeedbackHandler serves POST /v1/feedback: the score is recorded for the variant the
// conversation is assigned to, under the rollout's current step. 404 when no rollout knows the
// conversation.
func (s *Splitter) FeedbackHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in FeedbackRequest
		body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		if err == nil {
			err = json.Unmarshal(body, &in)
		}
		switch {
		case err != nil:
			feedbackError(w, http.StatusBadRequest, "", "invalid JSON: %v", err)
			return
		case in.SessionID == "":
			feedbackError(w, http.StatusBadRequest, "session_id", "missing required field \"session_id\"")
			return
		case in.Score == nil || *in.Score < 0 || *in.Score > 1:
			feedbackError(w, http.StatusBadRequest, "score", "\"score\" must be a number in [0, 1]")
			return
		}
		n, err := s.RecordFeedback(r.Context(), in)
		if err != nil {
			feedbackError(w, http.StatusServiceUnavailable, "", "%v", err)
			return
		}
		if n == 0 {
			feedbackError(w, http.StatusNotFound, "session_id", "no rollout has an assignment for this session")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"recorded":%d}`+"\n", n)
	})
}

// RecordFeedback records the score in every rollout (or the named one) that has an assignment
// for the session; it returns how many did.
func (s *Splitter) RecordFeedback(ctx context.Context, in FeedbackRequest) (int, error) {
	n := 0
	for _, v := range s.Table.All() {
		if in.Rollout != "" && v.Key() != in.Rollout {
			continue
		}
		x, ok, err := s.Store.Get(ctx, assignmentKey(v, in.SessionID))
		if err != nil {
			return n, fmt.Errorf("assignment store: %w", err)
		}
		if !ok {
			continue
		}
		s.Recorder.ObserveQuality(v, v.StepID, x, *in.Score)
		n++
	}
	return n, nil
}

func feedbackError(w http.ResponseWriter, status int, param, format string, a ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	msg := fmt.Sprintf(format, a...)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "param": param,
		"type": strings.ReplaceAll(strings.ToLower(http.StatusText(status)), " ", "_")}})
}
