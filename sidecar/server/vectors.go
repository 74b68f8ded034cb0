package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/neuronetes/neuronetes/sidecar/metrics"
	"github.com/neuronetes/neuronetes/sidecar/store"
	"github.com/neuronetes/neuronetes/sidecar/vector"
)

// maxVectorBody bounds vector API request bodies.
const maxVectorBody = 1 << 20

// Vectors serves the node-local vector shard and the embedding cache.
type Vectors struct {
	Index      *vector.Index
	Embeddings *vector.EmbeddingCache
	Metrics    *metrics.Metrics
}

// InsertRequest is the body of POST /v1/vectors.
type InsertRequest struct {
	ID       string          `json:"id"`
	Vector   []float32       `json:"vector"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// SearchRequest is the body of POST /v1/vectors/search.
type SearchRequest struct {
	Vector []float32 `json:"vector"`
	K      int       `json:"k"`
	Metric string    `json:"metric,omitempty"` // cosine (default) or l2
	NProbe int       `json:"nprobe,omitempty"` // 0: index default
}

// SearchHit is one result of a search.
type SearchHit struct {
	ID       string          `json:"id"`
	Score    float32         `json:"score"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// EmbeddingRequest is the body of the embedding cache endpoints.
type EmbeddingRequest struct {
	Model  string    `json:"model"`
	Text   string    `json:"text"`
	Vector []float32 `json:"vector,omitempty"`
}

func (v *Vectors) routes(mux *http.ServeMux, wrap func(string, http.HandlerFunc) http.HandlerFunc) {
	mux.HandleFunc("POST /v1/vectors", wrap("vector_insert", v.insert))
	mux.HandleFunc("POST /v1/vectors/search", wrap("vector_search", v.search))
	mux.HandleFunc("DELETE /v1/vectors/{id}", wrap("vector_delete", v.delete))
	mux.HandleFunc("POST /v1/embeddings/lookup", wrap("embedding_get", v.embGet))
	mux.HandleFunc("PUT /v1/embeddings", wrap("embedding_put", v.embPut))
}

// decodeJSON reads a JSON body of at most limit bytes into dst, strictly.
func decodeJSON(r *http.Request, limit int, dst any) error {
	b, err := readBody(r, limit)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, dst); err != nil {
		return fmt.Errorf("body: %v: %w", err, errBadRequest)
	}
	return nil
}

func decodeInsert(r *http.Request) (*InsertRequest, error) {
	var req InsertRequest
	if err := decodeJSON(r, maxVectorBody, &req); err != nil {
		return nil, err
	}
	if !store.ValidID(req.ID) {
		return nil, fmt.Errorf("id %q: %w", req.ID, errBadRequest)
	}
	if len(req.Vector) == 0 {
		return nil, fmt.Errorf("vector: empty: %w", errBadRequest)
	}
	return &req, nil
}

func decodeSearch(r *http.Request) (*SearchRequest, vector.Metric, error) {
	var req SearchRequest
	if err := decodeJSON(r, maxVectorBody, &req); err != nil {
		return nil, 0, err
	}
	m, ok := vector.ParseMetric(req.Metric)
	if !ok {
		return nil, 0, fmt.Errorf("metric %q: want cosine or l2: %w", req.Metric, errBadRequest)
	}
	if req.K <= 0 || req.K > 1000 || len(req.Vector) == 0 || req.NProbe < 0 {
		return nil, 0, fmt.Errorf("k %d / vector length %d / nprobe %d: %w", req.K, len(req.Vector), req.NProbe, errBadRequest)
	}
	return &req, m, nil
}

func vectorFail(w http.ResponseWriter, err error) {
	code := httpStatus(err)
	switch {
	case errors.Is(err, vector.ErrDim), errors.Is(err, vector.ErrInvalid):
		code = http.StatusBadRequest
	case errors.Is(err, vector.ErrNotFound), errors.Is(err, vector.ErrMiss):
		code = http.StatusNotFound
	}
	if code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, code, errorBody{Error: err.Error()})
}

func (v *Vectors) insert(w http.ResponseWriter, r *http.Request) {
	req, err := decodeInsert(r)
	if err != nil {
		vectorFail(w, err)
		return
	}
	evicted, err := v.Index.Insert(req.ID, req.Vector, req.Metadata)
	if err != nil {
		vectorFail(w, err)
		return
	}
	if v.Metrics != nil {
		v.Metrics.VectorEntries.Set(float64(v.Index.Len()))
	}
	writeJSON(w, http.StatusOK, map[string]any{"evicted": evicted})
}

func (v *Vectors) search(w http.ResponseWriter, r *http.Request) {
	req, m, err := decodeSearch(r)
	if err != nil {
		vectorFail(w, err)
		return
	}
	start := time.Now()
	res, err := v.Index.Search(req.Vector, req.K, m, req.NProbe)
	if err != nil {
		vectorFail(w, err)
		return
	}
	if v.Metrics != nil {
		v.Metrics.Retrieval(time.Since(start), req.K, len(res))
	}
	hits := make([]SearchHit, len(res))
	for i, h := range res {
		hits[i] = SearchHit{ID: h.ID, Score: h.Score, Metadata: h.Meta}
	}
	writeJSON(w, http.StatusOK, map[string]any{"results": hits})
}

func (v *Vectors) delete(w http.ResponseWriter, r *http.Request) {
	if err := v.Index.Delete(r.PathValue("id")); err != nil {
		vectorFail(w, err)
		return
	}
	if v.Metrics != nil {
		v.Metrics.VectorEntries.Set(float64(v.Index.Len()))
	}
	w.WriteHeader(http.StatusNoContent)
}

func decodeEmbedding(r *http.Request, needVector bool) (*EmbeddingRequest, error) {
	var req EmbeddingRequest
	if err := decodeJSON(r, maxVectorBody, &req); err != nil {
		return nil, err
	}
	if req.Model == "" || (needVector && len(req.Vector) == 0) {
		return nil, fmt.Errorf("model and (for PUT) vector are required: %w", errBadRequest)
	}
	return &req, nil
}

func (v *Vectors) embGet(w http.ResponseWriter, r *http.Request) {
	req, err := decodeEmbedding(r, false)
	if err != nil {
		vectorFail(w, err)
		return
	}
	vec, src, err := v.Embeddings.Get(r.Context(), vector.Key(req.Model, req.Text))
	if v.Metrics != nil && (err == nil || errors.Is(err, vector.ErrMiss)) {
		v.Metrics.Embedding(err == nil)
	}
	if err != nil {
		vectorFail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"vector": vec, "source": src})
}

func (v *Vectors) embPut(w http.ResponseWriter, r *http.Request) {
	req, err := decodeEmbedding(r, true)
	if err != nil {
		vectorFail(w, err)
		return
	}
	if err := v.Embeddings.Put(r.Context(), vector.Key(req.Model, req.Text), req.Vector); err != nil {
		vectorFail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
