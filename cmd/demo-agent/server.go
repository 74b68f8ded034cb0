package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// chatMessage is an OpenAI chat message.
type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// completionRequest covers the fields of /v1/chat/completions and /v1/completions the mock uses.
type completionRequest struct {
	Model          string        `json:"model"`
	Messages       []chatMessage `json:"messages,omitempty"`
	Prompt         string        `json:"prompt,omitempty"`
	MaxTokens      int           `json:"max_tokens,omitempty"`
	Stream         bool          `json:"stream,omitempty"`
	User           string        `json:"user,omitempty"`
	ConversationID string        `json:"conversation_id,omitempty"`
}

// server is the OpenAI-compatible HTTP front of the engine.
type server struct {
	eng     *engine
	m       *agentMetrics
	model   string
	sidecar *sidecarClient // nil when no sidecar is configured
	ready   atomic.Bool
	nextID  atomic.Int64
}

func (s *server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, true) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, false) })
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"object": "list", "data": []any{map[string]any{"id": s.model, "object": "model", "owned_by": "neuronetes"}}})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// countWords approximates tokens by whitespace-separated words.
func countWords(s string) int { return len(strings.Fields(s)) }

func (s *server) complete(w http.ResponseWriter, r *http.Request, chat bool) {
	start := time.Now()
	var req completionRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8<<20)).Decode(&req); err != nil {
		http.Error(w, fmt.Sprintf(`{"error":{"message":"bad request body: %v"}}`, err), http.StatusBadRequest)
		return
	}
	if chat && len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"messages must not be empty"}}`, http.StatusBadRequest)
		return
	}
	if req.MaxTokens <= 0 {
		req.MaxTokens = 16
	}
	conv := r.Header.Get("X-Conversation-ID")
	if conv == "" {
		conv = req.ConversationID
	}
	if conv == "" {
		conv = req.User
	}
	s.eng.touchSession(conv)

	prompt := req.Prompt
	for _, m := range req.Messages {
		prompt += " " + m.Content
	}
	promptTokens := countWords(prompt)
	contextTokens := promptTokens
	if s.sidecar != nil && conv != "" {
		contextTokens += s.sidecar.contextTokens(r.Context(), conv)
		if chat {
			last := req.Messages[len(req.Messages)-1]
			s.sidecar.appendTurn(r.Context(), conv, last.Role, last.Content)
		}
	}

	ahead, err := s.eng.acquire(r.Context(), promptTokens)
	if err != nil {
		return
	}
	defer s.eng.release()
	time.Sleep(s.eng.ttftFor(ahead, contextTokens))

	id := fmt.Sprintf("cmpl-%d", s.nextID.Add(1))
	created := time.Now().Unix()
	perToken := time.Duration(float64(time.Second) / s.eng.cfg.tokenRate)
	var out strings.Builder
	flusher, _ := w.(http.Flusher)
	if req.Stream {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
	}
	for i := 0; i < req.MaxTokens; i++ {
		if i == 0 {
			ttft := time.Since(start).Seconds()
			s.m.vllmTTFT.Observe(ttft)
			route := "completions"
			if chat {
				route = "chat"
			}
			s.m.ttft.WithLabelValues(route).Observe(ttft)
		} else {
			select {
			case <-time.After(perToken):
			case <-r.Context().Done():
				return
			}
		}
		tok := fmt.Sprintf("tok%d ", i)
		out.WriteString(tok)
		s.m.genTokens.Inc()
		s.m.tokens.WithLabelValues("output").Inc()
		s.eng.countTokens(1)
		if req.Stream {
			fmt.Fprintf(w, "data: %s\n\n", mustJSON(chunk(id, s.model, created, chat, tok, "")))
			if flusher != nil {
				flusher.Flush()
			}
		}
	}
	s.m.promptTokens.Add(float64(promptTokens))
	s.m.tokens.WithLabelValues("input").Add(float64(promptTokens))
	s.m.e2eLatency.Observe(time.Since(start).Seconds())
	if s.sidecar != nil && conv != "" && chat {
		s.sidecar.appendTurn(r.Context(), conv, "assistant", out.String())
	}
	if req.Stream {
		fmt.Fprintf(w, "data: %s\n\n", mustJSON(chunk(id, s.model, created, chat, "", "length")))
		fmt.Fprint(w, "data: [DONE]\n\n")
		return
	}
	// context_tokens counts the prompt plus the conversation stored in the sidecar, so a
	// client can see that a turn served by another replica was remembered.
	usage := map[string]int{"prompt_tokens": promptTokens, "completion_tokens": req.MaxTokens, "total_tokens": promptTokens + req.MaxTokens, "context_tokens": contextTokens}
	if chat {
		writeJSON(w, map[string]any{"id": id, "object": "chat.completion", "created": created, "model": s.model, "usage": usage,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "length", "message": chatMessage{Role: "assistant", Content: out.String()}}}})
		return
	}
	writeJSON(w, map[string]any{"id": id, "object": "text_completion", "created": created, "model": s.model, "usage": usage,
		"choices": []any{map[string]any{"index": 0, "finish_reason": "length", "text": out.String()}}})
}

func chunk(id, model string, created int64, chat bool, tok, finish string) map[string]any {
	var fr any
	if finish != "" {
		fr = finish
	}
	if chat {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]string{"content": tok}, "finish_reason": fr}}}
	}
	return map[string]any{"id": id, "object": "text_completion", "created": created, "model": model,
		"choices": []any{map[string]any{"index": 0, "text": tok, "finish_reason": fr}}}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
