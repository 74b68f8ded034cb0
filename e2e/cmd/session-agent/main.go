// Command session-agent is the tool-using AgentSession e2e's agent (e2e/session_tools_test.go):
// an OpenAI-compatible streaming chat server whose every turn calls a tool through the
// dispatcher's tool proxy (with the pod's projected token, $NEURONETES_TOOL_TOKEN_FILE), keeps the
// tool's answers in memory, and appends them to a journal in its workspace through a file it
// opened at start and keeps open (so a restore must bring the file back before the process).
// GET /state reports the memory and the journal as the process sees them; GET /dial?addr= tries a
// TCP connection from the pod (egress checks).
//
// Nothing stays connected between requests (no keep-alive to the tool proxy), so CRIU can dump
// the process at any idle moment.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

type agent struct {
	toolURL string
	journal *os.File
	path    string
	client  *http.Client

	mu     sync.Mutex
	memory []string // the tool's answers, one per turn
}

func main() {
	listen := flag.String("listen", ":8000", "HTTP address")
	toolURL := flag.String("tool-url", "", "the tool proxy URL of the tool every turn calls")
	workspace := flag.String("workspace", "/workspace", "directory of the journal")
	flag.Parse()
	path := filepath.Join(*workspace, "journal.txt")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	a := &agent{toolURL: *toolURL, journal: f, path: path,
		client: &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/v1/chat/completions", a.chat)
	mux.HandleFunc("/state", a.state)
	mux.HandleFunc("/dial", dial)
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	srv.SetKeepAlivesEnabled(false)
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// callTool calls the tool with the turn's text and returns its answer.
func (a *agent) callTool(turn int, text string) (string, error) {
	args, _ := json.Marshal(map[string]any{"turn": turn, "text": text})
	req, err := http.NewRequest(http.MethodPost, a.toolURL, bytes.NewReader(args))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	tok, err := os.ReadFile(os.Getenv("NEURONETES_TOOL_TOKEN_FILE"))
	if err != nil {
		return "", fmt.Errorf("tool token: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := a.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("tool proxy: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("tool proxy: %s: %s", resp.Status, b)
	}
	return strings.TrimSpace(string(b)), nil
}

func (a *agent) chat(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	text := req.Messages[len(req.Messages)-1].Content
	a.mu.Lock()
	defer a.mu.Unlock()
	turn := len(a.memory) + 1
	answer, err := a.callTool(turn, text)
	if err != nil {
		http.Error(w, fmt.Sprintf(`{"error":{"message":%q}}`, err.Error()), http.StatusBadGateway)
		return
	}
	a.memory = append(a.memory, answer)
	if _, err := fmt.Fprintf(a.journal, "turn %d: %s\n", turn, answer); err != nil {
		http.Error(w, fmt.Sprintf(`{"error":{"message":"journal: %s"}}`, err), http.StatusInternalServerError)
		return
	}
	content := fmt.Sprintf("turn %d; I remember %d tool answers; the last: %s", turn, len(a.memory), answer)
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(v map[string]any) {
		v["id"], v["object"], v["model"] = fmt.Sprintf("sess-%d", turn), "chat.completion.chunk", "session-agent"
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	chunk(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": content}}}})
	chunk(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}}})
	chunk(map[string]any{"choices": []any{}, "usage": map[string]int{"prompt_tokens": len(strings.Fields(text)),
		"completion_tokens": len(strings.Fields(content)), "total_tokens": len(strings.Fields(text)) + len(strings.Fields(content))}})
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// State is GET /state's answer.
type State struct {
	Turns  int      `json:"turns"`
	Memory []string `json:"memory"`
	// MemorySHA256 is over the memory's lines; Journal is the journal file read by its path.
	MemorySHA256 string `json:"memorySHA256"`
	Journal      string `json:"journal"`
}

func (a *agent) state(w http.ResponseWriter, _ *http.Request) {
	a.mu.Lock()
	mem := append([]string(nil), a.memory...)
	a.mu.Unlock()
	sum := sha256.Sum256([]byte(strings.Join(mem, "\n")))
	j, err := os.ReadFile(a.path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_ = json.NewEncoder(w).Encode(State{Turns: len(mem), Memory: mem, MemorySHA256: hex.EncodeToString(sum[:]), Journal: string(j)})
}

// dial answers {"error": ""} when a TCP connection to addr opened within 3 s.
func dial(w http.ResponseWriter, r *http.Request) {
	msg := ""
	c, err := net.DialTimeout("tcp", r.URL.Query().Get("addr"), 3*time.Second)
	if err != nil {
		msg = err.Error()
	} else {
		c.Close()
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
