// Command ledger-agent is the dispatcher e2e's agent: an OpenAI-compatible chat completion
// server that takes --latency per request and, when it completes one, records in Redis which
// message it processed (the request's metadata.neuronetes_message_id), on which pod and for
// which dispatcher replica, so that a test can count how often each message was processed.
// A request cancelled before its latency ran out is aborted and not recorded, as a model
// server aborts a request whose client went away. POST /call makes a tool call through the
// dispatcher's tool proxy from the pod, with the pod's projected token ($NEURONETES_TOOL_TOKEN_FILE)
// as its credential.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	listen := flag.String("listen", ":8000", "HTTP address")
	redisAddr := flag.String("redis", "", "Redis host:port of the ledger (empty: no ledger)")
	ledger := flag.String("ledger", "ledger", "key prefix of the ledger")
	latency := flag.Duration("latency", 50*time.Millisecond, "time to answer a request")
	name := flag.String("name", "", "name recorded in the ledger (default the host name: the pod's name)")
	flag.Parse()
	pod := *name
	if pod == "" {
		pod, _ = os.Hostname()
	}
	var rc *redis.Client
	if *redisAddr != "" {
		rc = redis.NewClient(&redis.Options{Addr: *redisAddr})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Metadata map[string]string `json:"metadata"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
			return
		}
		select {
		case <-r.Context().Done():
			return // aborted: not processed
		case <-time.After(*latency):
		}
		id := req.Metadata["neuronetes_message_id"]
		if rc != nil && id != "" {
			entry := fmt.Sprintf("%s %s %s %d", id, pod, req.Metadata["neuronetes_dispatcher"], time.Now().UnixMilli())
			p := rc.TxPipeline()
			p.HIncrBy(context.Background(), *ledger+":done", id, 1)
			p.RPush(context.Background(), *ledger+":log", entry)
			if _, err := p.Exec(context.Background()); err != nil {
				http.Error(w, `{"error":{"message":"ledger: `+err.Error()+`"}}`, http.StatusInternalServerError)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c-%s","object":"chat.completion","model":"ledger","choices":[{"index":0,"message":{"role":"assistant","content":"done %s by %s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":3,"total_tokens":4}}`, id, id, pod)
	})
	mux.HandleFunc("/call", func(w http.ResponseWriter, r *http.Request) {
		var c struct {
			URL       string          `json:"url"`
			Arguments json.RawMessage `json:"arguments"`
			Key       string          `json:"idempotency_key"`
			NoToken   bool            `json:"no_token"` // call without the pod's token (attack tests)
		}
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, c.URL, bytes.NewReader(c.Arguments))
		req.Header.Set("Content-Type", "application/json")
		// The pod's credential for the tool proxy: read at each call, as the kubelet rotates it.
		if f := os.Getenv("NEURONETES_TOOL_TOKEN_FILE"); f != "" && !c.NoToken {
			tok, err := os.ReadFile(f)
			if err != nil {
				http.Error(w, "tool token: "+err.Error(), http.StatusInternalServerError)
				return
			}
			req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		}
		if c.Key != "" {
			req.Header.Set("Idempotency-Key", c.Key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, "tool proxy: "+err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		w.Header().Set("X-Tool-Status", strconv.Itoa(resp.StatusCode))
		_, _ = w.Write(b)
	})
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		<-ch
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
