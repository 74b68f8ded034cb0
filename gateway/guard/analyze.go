package guard

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"

	"github.com/neuronetes/neuronetes/gateway/guard/pii"
)

// maxAnalyzeBody bounds the /analyze request body.
const maxAnalyzeBody = 4 << 20

// AnalyzeHandler serves the built-in detector with Presidio's analyzer API, so Presidio's
// clients and evaluation tools work against it:
//
//	POST /analyze            {"text", "language", "entities"?, "score_threshold"?} -> [{"entity_type", "start", "end", "score"}]
//	GET  /supportedentities  -> ["EMAIL_ADDRESS", ...]
//
// Offsets count code points, as Presidio's do. Detection is language-independent; "language"
// is accepted and echoed nowhere.
func AnalyzeHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /analyze", serveAnalyze)
	mux.HandleFunc("GET /supportedentities", func(w http.ResponseWriter, _ *http.Request) {
		names := make([]string, 0, len(pii.AllEntities))
		for _, e := range pii.AllEntities {
			names = append(names, string(e))
		}
		writeJSON(w, http.StatusOK, names)
	})
	return mux
}

func serveAnalyze(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxAnalyzeBody+1))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "read body: " + err.Error()})
		return
	}
	if len(body) > maxAnalyzeBody {
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("body over %d bytes", maxAnalyzeBody)})
		return
	}
	var in AnalyzeRequest
	if err := json.Unmarshal(body, &in); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid JSON: " + err.Error()})
		return
	}
	res, err := Analyze(in)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// Analyze runs the built-in detector on a Presidio-shaped request. Errors name the bad field.
func Analyze(in AnalyzeRequest) ([]AnalyzeResult, error) {
	if in.Text == "" {
		return nil, fmt.Errorf("field \"text\" is required")
	}
	opts := pii.Options{MinScore: in.ScoreThreshold}
	for i, name := range in.Entities {
		e, ok := pii.ParseEntity(name)
		if !ok {
			return nil, fmt.Errorf("entities[%d]: unknown entity %q (GET /supportedentities lists them)", i, name)
		}
		opts.Entities = append(opts.Entities, e)
	}
	fs := pii.New(opts).Detect(in.Text)
	return ToAnalyzeResults(in.Text, fs), nil
}

// ToAnalyzeResults converts findings to Presidio results with code-point offsets, highest score
// first as Presidio orders them.
func ToAnalyzeResults(text string, fs []pii.Finding) []AnalyzeResult {
	out := make([]AnalyzeResult, 0, len(fs))
	if len(fs) == 0 {
		return out
	}
	pos := map[int]int{} // byte offset -> code point offset, for the offsets in fs
	for _, f := range fs {
		pos[f.Start], pos[f.End] = 0, 0
	}
	n := 0
	for i := range text {
		if _, ok := pos[i]; ok {
			pos[i] = n
		}
		n++
	}
	if _, ok := pos[len(text)]; ok {
		pos[len(text)] = n
	}
	for _, f := range fs {
		out = append(out, AnalyzeResult{EntityType: string(f.Entity), Start: pos[f.Start], End: pos[f.End], Score: f.Score})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Score > out[j].Score })
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
