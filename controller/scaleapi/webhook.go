// Package scaleapi serves the seed's POST /v1/scale: an authenticated request to
// set a pool's serving replicas for a while, applied by the autoscaling loop as
// a manual override (still bounded by min/max and the budget).
package scaleapi

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/controller/scalepolicy"
)

// DefaultTTL is how long an override lasts when the request sets none.
const DefaultTTL = 10 * time.Minute

// Overrides stores manual scale requests by pool until they expire. It is safe
// for concurrent use.
type Overrides struct {
	mu sync.Mutex
	m  map[types.NamespacedName]entry
	// Notify, when set, is called after a request is stored (to trigger an immediate evaluation).
	Notify func(types.NamespacedName)
}

type entry struct {
	o     scalepolicy.Override
	until time.Time
}

// Set stores an override for pool until the given time.
func (s *Overrides) Set(pool types.NamespacedName, o scalepolicy.Override, until time.Time) {
	s.mu.Lock()
	if s.m == nil {
		s.m = map[types.NamespacedName]entry{}
	}
	s.m[pool] = entry{o, until}
	notify := s.Notify
	s.mu.Unlock()
	if notify != nil {
		notify(pool)
	}
}

// Get returns the live override of pool, or nil; expired ones are dropped.
func (s *Overrides) Get(pool types.NamespacedName, now time.Time) *scalepolicy.Override {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[pool]
	if !ok {
		return nil
	}
	if !now.Before(e.until) {
		delete(s.m, pool)
		return nil
	}
	o := e.o
	return &o
}

// Request is the body of POST /v1/scale.
type Request struct {
	// Pool is the AgentPool name.
	Pool string `json:"pool"`
	// Namespace is the pool's namespace (default: the handler's DefaultNamespace).
	Namespace string `json:"namespace,omitempty"`
	// Replicas is the requested serving replica count.
	Replicas *int32 `json:"replicas"`
	// Reason is recorded in the decision and its Event.
	Reason string `json:"reason,omitempty"`
	// TTLSeconds is how long the override holds (default DefaultTTL).
	TTLSeconds int64 `json:"ttlSeconds,omitempty"`
}

// Handler serves POST /v1/scale.
type Handler struct {
	// Token is the required bearer token; an empty token rejects every request.
	Token string
	// DefaultNamespace is used when a request names none.
	DefaultNamespace string
	// Store receives the accepted overrides.
	Store *Overrides
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// TokenFromFile reads a bearer token (a mounted Secret key), trimming whitespace.
func TokenFromFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read scale webhook token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("scale webhook token file %s is empty", path)
	}
	return t, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	logger := klog.FromContext(r.Context())
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || h.Token == "" || subtle.ConstantTimeCompare([]byte(got), []byte(h.Token)) != 1 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="neuronetes"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	var req Request
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		http.Error(w, fmt.Sprintf("bad request body: %v", err), http.StatusBadRequest)
		return
	}
	if err := req.validate(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ns := req.Namespace
	if ns == "" {
		ns = h.DefaultNamespace
	}
	ttl := DefaultTTL
	if req.TTLSeconds > 0 {
		ttl = time.Duration(req.TTLSeconds) * time.Second
	}
	now := time.Now()
	if h.Now != nil {
		now = h.Now()
	}
	key := types.NamespacedName{Namespace: ns, Name: req.Pool}
	reason := req.Reason
	if reason == "" {
		reason = "webhook"
	}
	h.Store.Set(key, scalepolicy.Override{Replicas: *req.Replicas, Reason: reason}, now.Add(ttl))
	logger.Info("Scale override accepted", "pool", key, "replicas", *req.Replicas, "reason", reason, "ttl", ttl)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(map[string]any{"pool": req.Pool, "namespace": ns, "replicas": *req.Replicas,
		"until": now.Add(ttl).UTC().Format(time.RFC3339)})
}

func (r Request) validate() error {
	switch {
	case r.Pool == "":
		return fmt.Errorf("pool: required")
	case r.Replicas == nil:
		return fmt.Errorf("replicas: required")
	case *r.Replicas < 0:
		return fmt.Errorf("replicas: must be >= 0, got %d", *r.Replicas)
	case r.TTLSeconds < 0:
		return fmt.Errorf("ttlSeconds: must be >= 0, got %d", r.TTLSeconds)
	}
	return nil
}
