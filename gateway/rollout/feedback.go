package rollout

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/quota"
	"github.com/neuronetes/neuronetes/gateway/sessionkey"
)

// FeedbackRequest is the body of POST /v1/feedback: a quality score for a conversation, from a
// user's rating or an evaluator.
type FeedbackRequest struct {
	// SessionID is the conversation's session key as the client sent it (the gateway scopes it
	// by the caller's tenant, as it does on requests).
	SessionID string `json:"session_id"`
	// Score in [0, 1].
	Score *float64 `json:"score"`
	// Rollout ("namespace/name") limits the lookup; empty tries every rollout of the caller's
	// namespace.
	Rollout string `json:"rollout,omitempty"`
}

// Feedback serves POST /v1/feedback for the Splitter's rollouts.
//
// Invariants: a score counts only for a session of the caller's own tenant (the session id is
// scoped by the tenant before the lookup, and only rollouts of the tenant's namespace are
// searched), so an unknown session and another tenant's session get the same 404; each session
// is scored at most once per rollout run while its assignment lives (later posts get 409); each
// tenant may post Rate scores per second (Burst at once) on each replica (429 beyond).
type Feedback struct {
	// Splitter holds the rollouts and their assignment store (required).
	Splitter *Splitter
	// Sessions scopes session ids as the engine does (required).
	Sessions *sessionkey.Scoper
	// Rate and Burst bound each tenant's posts per second on this replica (defaults 5 and 20).
	Rate, Burst float64
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu      sync.Mutex
	buckets map[string]quota.Bucket
}

// Feedback outcomes of one rollout.
const (
	fbNone = iota
	fbRecorded
	fbDuplicate
)

// ServeHTTP implements http.Handler; the caller must be authenticated (access.FromContext).
func (f *Feedback) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := access.FromContext(r.Context())
	if t == nil {
		feedbackError(w, http.StatusUnauthorized, "", "unauthenticated")
		return
	}
	if wait, ok := f.allow(t.Key()); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		feedbackError(w, http.StatusTooManyRequests, "", "too many feedback posts; retry in %s", wait.Round(time.Millisecond))
		return
	}
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
	recorded, dup, err := f.Record(r.Context(), t, in)
	switch {
	case err != nil:
		feedbackError(w, http.StatusServiceUnavailable, "", "%v", err)
	case recorded > 0:
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"recorded":%d}`+"\n", recorded)
	case dup > 0:
		feedbackError(w, http.StatusConflict, "session_id", "a score was already recorded for this session")
	default:
		feedbackError(w, http.StatusNotFound, "session_id", "no rollout has an assignment for this session")
	}
}

// Record records the score in every rollout of t's namespace (or the named one) that has an
// assignment for t's session and no score for it yet; it returns how many recorded it and how
// many already had a score.
func (f *Feedback) Record(ctx context.Context, t *access.Tenant, in FeedbackRequest) (recorded, duplicate int, err error) {
	s := f.Splitter
	session := f.Sessions.Scope(t, in.SessionID)
	for _, v := range s.Table.All() {
		if !t.Anonymous && v.Namespace != t.Namespace || in.Rollout != "" && v.Key() != in.Rollout {
			continue
		}
		res, err := f.recordOne(ctx, v, session, *in.Score)
		if err != nil {
			return recorded, duplicate, err
		}
		switch res {
		case fbRecorded:
			recorded++
		case fbDuplicate:
			duplicate++
		}
	}
	return recorded, duplicate, nil
}

// recordOne scores the session in one rollout: the first post claims the session's score
// marker (the store's first writer wins, so replicas agree), later ones find it taken.
func (f *Feedback) recordOne(ctx context.Context, v *View, session string, score float64) (int, error) {
	s := f.Splitter
	key := assignmentKey(v, session)
	x, ok, err := s.Store.Get(ctx, key)
	if err != nil {
		return fbNone, fmt.Errorf("assignment store: %w", err)
	}
	if !ok || x != Stable && x != Canary {
		return fbNone, nil
	}
	claim := Variant(nonce())
	got, err := s.Store.Assign(ctx, key+":scored", claim)
	if err != nil {
		return fbNone, fmt.Errorf("assignment store: %w", err)
	}
	if got != claim {
		return fbDuplicate, nil
	}
	s.Recorder.ObserveQuality(v, v.StepID, x, score)
	return fbRecorded, nil
}

// allow takes one post from tenant's bucket.
func (f *Feedback) allow(tenant string) (time.Duration, bool) {
	rate, burst := f.Rate, f.Burst
	if rate <= 0 {
		rate = 5
	}
	if burst < 1 {
		burst = 20
	}
	now := time.Now()
	if f.Now != nil {
		now = f.Now()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.buckets == nil {
		f.buckets = map[string]quota.Bucket{}
	}
	b, ok, wait := quota.Take(f.buckets[tenant], rate, burst, 1, now)
	if ok {
		f.buckets[tenant] = b // one entry per Tenant object: bounded by the tenants
	}
	return wait, ok
}

func nonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func feedbackError(w http.ResponseWriter, status int, param, format string, a ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	msg := fmt.Sprintf(format, a...)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "param": param,
		"type": strings.ReplaceAll(strings.ToLower(http.StatusText(status)), " ", "_")}})
}
