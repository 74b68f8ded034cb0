package server

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"

	"github.com/neuronetes/neuronetes/demoagent/tokenize"
)

// DefaultEmbeddingDim is the length of the demo agent's embedding vectors.
const DefaultEmbeddingDim = 16

// embeddingRequest is the body of /v1/embeddings (vLLM's OpenAI-compatible shape).
type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

// embeddingInputs reads input: a string, an array of strings, an array of token ids or an
// array of such arrays, as token ids per input.
func embeddingInputs(raw json.RawMessage) ([][]uint64, *requestError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("input", "input is required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return [][]uint64{tokenize.Append(nil, s)}, nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil && len(ss) > 0 {
		out := make([][]uint64, len(ss))
		for i, t := range ss {
			out[i] = tokenize.Append(nil, t)
		}
		return out, nil
	}
	var ids []uint64
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return [][]uint64{ids}, nil
	}
	var idss [][]uint64
	if json.Unmarshal(raw, &idss) == nil && len(idss) > 0 {
		return idss, nil
	}
	return nil, badRequest("input", "input must be a string, a non-empty array of strings, of token ids, or of token id arrays")
}

// embed is the unit vector of dim dimensions of a bag of tokens: every token adds ±1 to a
// dimension its id picks, so equal texts embed equally and texts that share words are close.
func embed(ids []uint64, dim int) []float64 {
	v := make([]float64, dim)
	for _, id := range ids {
		sign := 1.0
		if id>>63 == 1 {
			sign = -1
		}
		v[id%uint64(dim)] += sign
	}
	norm := 0.0
	for _, x := range v {
		norm += x * x
	}
	if norm == 0 {
		v[0] = 1
		return v
	}
	norm = math.Sqrt(norm)
	for i := range v {
		v[i] /= norm
	}
	return v
}

// embeddings serves POST /v1/embeddings: {"object":"list","data":[{"object":"embedding",
// "index","embedding"}],"model","usage":{"prompt_tokens","total_tokens"}}; encoding_format
// "base64" sends little-endian float32s, as OpenAI does.
func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, &requestError{status: http.StatusRequestEntityTooLarge, message: fmt.Sprintf("request body is over %d bytes", s.cfg.MaxBodyBytes)})
			return
		}
		writeError(w, badRequest("", "reading the request body: %v", err))
		return
	}
	var req embeddingRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, badRequest("", "request body is not valid JSON: %v", err))
		return
	}
	inputs, rerr := embeddingInputs(req.Input)
	if rerr != nil {
		writeError(w, rerr)
		return
	}
	dim := s.cfg.EmbeddingDim
	if req.Dimensions != nil {
		if *req.Dimensions < 1 || *req.Dimensions > dim {
			writeError(w, badRequest("dimensions", "dimensions must be within [1, %d], got %d", dim, *req.Dimensions))
			return
		}
		dim = *req.Dimensions
	}
	format := req.EncodingFormat
	if format == "" {
		format = "float"
	}
	if format != "float" && format != "base64" {
		writeError(w, badRequest("encoding_format", "encoding_format must be float or base64, got %q", format))
		return
	}
	data := make([]map[string]any, len(inputs))
	tokens := 0
	for i, ids := range inputs {
		if len(ids) > s.eng.MaxTokens() {
			writeError(w, badRequest("input", "input[%d] has %d tokens; this model's maximum context length is %d tokens", i, len(ids), s.eng.MaxTokens()))
			return
		}
		tokens += len(ids)
		v := embed(ids, dim)
		var e any = v
		if format == "base64" {
			b := make([]byte, 4*len(v))
			for j, x := range v {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(float32(x)))
			}
			e = base64.StdEncoding.EncodeToString(b)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": e}
	}
	s.m.promptTokens.Add(float64(tokens))
	s.m.nnTokens.WithLabelValues("input").Add(float64(tokens))
	writeJSON(w, http.StatusOK, map[string]any{"id": "embd-" + s.idBase + fmt.Sprint(s.nextID.Add(1)), "object": "list",
		"created": s.clk.Now().Unix(), "model": s.cfg.Model, "data": data,
		"usage": map[string]int{"prompt_tokens": tokens, "total_tokens": tokens}})
}
