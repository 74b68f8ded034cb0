// Package nodeapi is the node agent's local API: HTTP/JSON over a unix socket (default
// /var/run/neuronetes/nodeagent.sock).
//
//	POST /v1/ensure-warm   body EnsureWarmRequest; waits until the weights are cached and warm
//	                       (?wait=false returns 202 at once). 200 with the State, or an error.
//	GET  /v1/status        StatusResponse: every entry with phase, progress, residency, pins.
package nodeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/internal/serving"
	"github.com/neuronetes/neuronetes/nodeagent/agent"
)

// ModelRef names a Model object.
type ModelRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// EnsureWarmRequest names either a Model or a source URI with its digest.
type EnsureWarmRequest struct {
	// Model, when set, is resolved to its source, digest and credentials.
	Model *ModelRef `json:"model,omitempty"`
	// URI of the weights (file://, http(s)://, s3://) when Model is not set.
	URI string `json:"uri,omitempty"`
	// Digest "sha256:<hex>" when Model is not set.
	Digest string `json:"digest,omitempty"`
	// SizeBytes is optional.
	SizeBytes int64 `json:"sizeBytes,omitempty"`
}

// StatusResponse is the body of GET /v1/status.
type StatusResponse struct {
	Node      string        `json:"node"`
	CacheDir  string        `json:"cacheDir"`
	UsedBytes int64         `json:"usedBytes"`
	Entries   []agent.State `json:"entries"`
}

// ErrorResponse is the body of every non-2xx reply.
type ErrorResponse struct {
	Error string `json:"error"`
}

// Backend is what the API needs from the agent.
type Backend interface {
	// EnsureWarm caches and warms; blocking.
	EnsureWarm(ctx context.Context, req agent.Request) (agent.State, error)
	// Start begins an EnsureWarm in the background.
	Start(req agent.Request) <-chan struct{}
	// State returns one entry's state.
	State(hex string) agent.State
	// Refresh re-measures and returns all states.
	Refresh() []agent.State
	// ResolveModel turns a Model reference into a request (source, digest, credentials).
	ResolveModel(ctx context.Context, namespace, name string) (agent.Request, error)
}

// Handler serves the API for b on node, whose cache lives in cacheDir.
func Handler(b Backend, node, cacheDir string, usedBytes func() int64) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/ensure-warm", func(w http.ResponseWriter, r *http.Request) {
		var in EnsureWarmRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&in); err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("request body: %w", err))
			return
		}
		var req agent.Request
		switch {
		case in.Model != nil:
			var err error
			if req, err = b.ResolveModel(r.Context(), in.Model.Namespace, in.Model.Name); err != nil {
				writeErr(w, http.StatusNotFound, err)
				return
			}
		case in.Digest != "":
			req = agent.Request{Digest: in.Digest, URI: in.URI, SizeBytes: in.SizeBytes}
		default:
			writeErr(w, http.StatusBadRequest, errors.New("request needs model, or digest (and uri)"))
			return
		}
		if r.URL.Query().Get("wait") == "false" {
			b.Start(req)
			hex := req.Digest[len("sha256:"):]
			writeJSON(w, http.StatusAccepted, b.State(hex))
			return
		}
		st, err := b.EnsureWarm(r.Context(), req)
		if err != nil {
			writeErr(w, http.StatusUnprocessableEntity, err)
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, StatusResponse{Node: node, CacheDir: cacheDir, UsedBytes: usedBytes(), Entries: b.Refresh()})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, ErrorResponse{Error: err.Error()})
}

// Serve listens on the unix socket path (replacing a stale one) and serves h until ctx ends.
func Serve(ctx context.Context, path string, h http.Handler) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("socket dir: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return fmt.Errorf("chmod socket: %w", err)
	}
	srv := serving.Stream(0).Server("", h)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	klog.FromContext(ctx).Info("Node API listening", "socket", path)
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("node api: %w", err)
	}
	return nil
}
