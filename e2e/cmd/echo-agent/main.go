// Command echo-agent is an e2e stand-in model server: POST /v1/chat/completions answers with the
// last user message, streamed as SSE chunks of --chunk bytes (so a value in the message is split
// across chunks), or whole without "stream". GET /readyz answers 200. The guardrail e2e tests use
// it to put known text into a streamed response.
//
// With --remember it stands in for an agent with session memory (as the demo agent with its
// sidecar): it keeps the user turns of each X-Conversation-Id it receives and answers, instead of
// the echo, the JSON {"conversation": id, "turns": [every user turn of it so far]}.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"sync"
	"time"
)

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type request struct {
	Model    string    `json:"model"`
	Messages []message `json:"messages"`
	Stream   bool      `json:"stream"`
	// ConversationID and User are the body's identity fields, reported back with --remember.
	ConversationID string `json:"conversation_id"`
	User           string `json:"user"`
}

func main() {
	listen := flag.String("listen", ":8000", "listen address")
	chunk := flag.Int("chunk", 4, "bytes of text per streamed chunk")
	delay := flag.Duration("chunk-delay", 2*time.Millisecond, "pause between chunks")
	remember := flag.Bool("remember", false, "answer with the conversation's remembered user turns (keyed by X-Conversation-Id) and the body's conversation_id and user as received")
	flag.Parse()
	var mu sync.Mutex
	memory := map[string][]string{}
	if *chunk < 1 {
		log.Fatalf("--chunk must be at least 1, got %d", *chunk)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var req request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, `{"error":{"message":"messages: a non-empty array is required","param":"messages"}}`, http.StatusBadRequest)
			return
		}
		text := ""
		for _, m := range req.Messages {
			if m.Role == "user" {
				text = m.Content
			}
		}
		if *remember {
			conv := r.Header.Get("X-Conversation-Id")
			mu.Lock()
			memory[conv] = append(memory[conv], text)
			b, _ := json.Marshal(map[string]any{"conversation": conv, "turns": memory[conv],
				"bodyConversation": req.ConversationID, "bodyUser": req.User})
			mu.Unlock()
			text = string(b)
		}
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"id": "echo", "object": "chat.completion", "model": req.Model,
				"choices": []any{map[string]any{"index": 0, "message": map[string]string{"role": "assistant", "content": text}, "finish_reason": "stop"}}})
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl, _ := w.(http.Flusher)
		send := func(v any) {
			b, _ := json.Marshal(v)
			fmt.Fprintf(w, "data: %s\n\n", b)
			if fl != nil {
				fl.Flush()
			}
		}
		for i := 0; i < len(text); i += *chunk {
			part := text[i:min(i+*chunk, len(text))]
			send(map[string]any{"id": "echo", "object": "chat.completion.chunk", "model": req.Model,
				"choices": []any{map[string]any{"index": 0, "delta": map[string]string{"content": part}, "finish_reason": nil}}})
			time.Sleep(*delay)
		}
		send(map[string]any{"id": "echo", "object": "chat.completion.chunk", "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]string{}, "finish_reason": "stop"}}})
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	log.Fatal(http.ListenAndServe(*listen, mux))
}
