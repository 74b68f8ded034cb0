package scaleapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// Request is the body of POST /v1/scale.
type Request struct {
	// Pool is the AgentPool name.
	Pool string `json:"pool"`
	// Namespace is the pool's namespace (default: the token's only namespace, else the handler's
	// DefaultNamespace).
	Namespace string `json:"namespace,omitempty"`
	// Replicas is the requested serving replica count.
	Replicas *int32 `json:"replicas"`
	// Reason is recorded in the decision and its Event.
	Reason string `json:"reason,omitempty"`
	// TTLSeconds is how long the override holds (default DefaultTTL).
	TTLSeconds int64 `json:"ttlSeconds,omitempty"`
}

// Handler serves POST /v1/scale. Answers: 202 stored, 400 bad body (the message names the field),
// 401 unknown token, 403 namespace outside the token's scope, 404 no such pool, 409 the pool has no
// spec.autoscaling (nothing would apply the override).
type Handler struct {
	// Tokens authenticates requests; nil rejects every request.
	Tokens *Tokens
	// DefaultNamespace is used when a request names none and its token covers several namespaces.
	DefaultNamespace string
	// Client writes the override annotation.
	Client client.Client
	// Reader reads the pool from the apiserver (nil: Client). A cache scoped to the controller's
	// namespace cannot answer for other namespaces.
	Reader client.Reader
	// Scope, when set, is the only namespace the controller manages: pools elsewhere are not found.
	Scope string
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	logger := klog.FromContext(r.Context())
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	scope, all, ok := h.Tokens.Lookup(token)
	if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") || !ok {
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
		if len(scope) == 1 && !all {
			for only := range scope {
				ns = only
			}
		}
	}
	if ns == "" {
		http.Error(w, "namespace: required (the token covers several namespaces and the controller has no default)", http.StatusBadRequest)
		return
	}
	if !all && !scope[ns] {
		http.Error(w, fmt.Sprintf("namespace %q: not allowed for this token (allowed: %s)", ns, strings.Join(sortedKeys(scope), ", ")), http.StatusForbidden)
		return
	}
	ttl := DefaultTTL
	if req.TTLSeconds > 0 {
		ttl = time.Duration(req.TTLSeconds) * time.Second
	}
	now := time.Now()
	if h.Now != nil {
		now = h.Now()
	}
	reason := req.Reason
	if reason == "" {
		reason = "webhook"
	}
	o := Override{Replicas: *req.Replicas, Reason: reason, Until: now.Add(ttl)}
	key := types.NamespacedName{Namespace: ns, Name: req.Pool}
	if code, err := h.store(r.Context(), key, o); err != nil {
		http.Error(w, err.Error(), code)
		return
	}
	logger.Info("Scale override stored", "pool", key, "replicas", o.Replicas, "reason", reason, "ttl", ttl)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(map[string]any{"pool": req.Pool, "namespace": ns, "replicas": o.Replicas,
		"until": o.Until.UTC().Format(time.RFC3339)})
}

// store writes o into the pool's annotation; it returns the HTTP status of a failure.
func (h *Handler) store(ctx context.Context, key types.NamespacedName, o Override) (int, error) {
	if h.Scope != "" && key.Namespace != h.Scope {
		return http.StatusNotFound, fmt.Errorf("agentpool %s not found: this controller manages namespace %s only", key, h.Scope)
	}
	r := h.Reader
	if r == nil {
		r = h.Client
	}
	var pool v1alpha1.AgentPool
	if err := r.Get(ctx, key, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			return http.StatusNotFound, fmt.Errorf("agentpool %s not found", key)
		}
		return http.StatusInternalServerError, fmt.Errorf("get agentpool %s: %w", key, err)
	}
	if pool.Spec.Autoscaling == nil {
		return http.StatusConflict, fmt.Errorf("agentpool %s has no spec.autoscaling: no autoscaler would apply the override; use kubectl scale", key)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{OverrideAnnotation: o.Encode()}}})
	if err != nil {
		return http.StatusInternalServerError, err
	}
	if err := h.Client.Patch(ctx, &pool, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsNotFound(err) {
			return http.StatusNotFound, fmt.Errorf("agentpool %s not found", key)
		}
		return http.StatusInternalServerError, fmt.Errorf("store override on agentpool %s: %w", key, err)
	}
	return 0, nil
}

func (r Request) validate() error {
	switch {
	case r.Pool == "":
		return errors.New("pool: required")
	case r.Replicas == nil:
		return errors.New("replicas: required")
	case *r.Replicas < 0:
		return fmt.Errorf("replicas: must be >= 0, got %d", *r.Replicas)
	case r.TTLSeconds < 0:
		return fmt.Errorf("ttlSeconds: must be >= 0, got %d", r.TTLSeconds)
	case r.TTLSeconds > 7*24*3600:
		return fmt.Errorf("ttlSeconds: must be at most 604800 (7 days), got %d", r.TTLSeconds)
	}
	return nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
