package server

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestAnswerStoredBeforeDone: the assistant turn is in the sidecar's session by the time the
// client reads [DONE] (streamed) or the whole answer (non-streamed), so the next turn sent at
// once sees it; a client that closes its connection right after cannot cancel the store.
func TestAnswerStoredBeforeDone(t *testing.T) {
	var mu sync.Mutex
	stored := map[string][]string{} // conversation -> roles
	sc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/sessions/"), "/")
		if r.Method != http.MethodPost || len(parts) != 2 {
			http.NotFound(w, r)
			return
		}
		var m map[string]string
		_ = json.NewDecoder(r.Body).Decode(&m)
		mu.Lock()
		stored[parts[0]] = append(stored[parts[0]], m["role"])
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	defer sc.Close()
	cfg := testConfig()
	cfg.SidecarURL = sc.URL
	_, ts := newTestServer(t, fastEngine(), cfg, nil)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for _, stream := range []bool{true, false} {
		conv := "conv-stream"
		if !stream {
			conv = "conv-whole"
		}
		body := `{"messages":[{"role":"user","content":"hello"}],"max_tokens":4,"stream":` + map[bool]string{true: "true", false: "false"}[stream] + `}`
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("X-Conversation-ID", conv)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		last := ""
		for sc.Scan() {
			if l := strings.TrimSpace(sc.Text()); l != "" {
				last = l
			}
			if last == "data: [DONE]" {
				break
			}
		}
		resp.Body.Close() // at [DONE] (streamed) or at the end of the body
		if stream && last != "data: [DONE]" {
			t.Fatalf("stream ended with %q", last)
		}
		mu.Lock()
		got := strings.Join(stored[conv], ",")
		mu.Unlock()
		if got != "user,assistant" {
			t.Errorf("stream=%v: stored turns when the client had the answer: %q, want user,assistant", stream, got)
		}
	}
}
