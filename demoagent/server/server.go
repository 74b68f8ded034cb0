// Package server is the demo agent's OpenAI-compatible HTTP front over the engine model:
// /v1/chat/completions and /v1/completions (streamed as server-sent events or not, usage in the
// last chunk when stream_options.include_usage is set, tool calls on request), /v1/embeddings,
// /v1/models,
// /metrics under vLLM's current names plus the seed's neuronetes_* names, /healthz and /readyz.
// Session memory comes from the NeuroNetes sidecar when one is configured.
package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/utils/clock"

	"github.com/neuronetes/neuronetes/demoagent/engine"
	"github.com/neuronetes/neuronetes/demoagent/tokenize"
)

// Config shapes the HTTP front.
type Config struct {
	// Model is the name /v1/models lists and responses and metrics carry; AgentClass labels the
	// neuronetes_* metrics.
	Model, AgentClass string
	// DefaultMaxTokens applies when a request sets neither max_tokens nor max_completion_tokens.
	DefaultMaxTokens int
	// MaxBodyBytes bounds a request body (413 above it).
	MaxBodyBytes int64
	// FailRate is the share of requests (0-1) failed on purpose, the way FailMode says.
	FailRate float64
	FailMode FailMode
	// ToolCalls answers a chat request that lists tools (and whose tool_choice is not "none")
	// with a call of the chosen tool instead of text.
	ToolCalls bool
	// SidecarURL is the sidecar's base URL; empty disables session memory.
	SidecarURL string
	// EmbeddingDim is the length of /v1/embeddings vectors (default DefaultEmbeddingDim).
	EmbeddingDim int
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Model == "":
		return errors.New("model must not be empty")
	case c.DefaultMaxTokens < 1:
		return fmt.Errorf("default max tokens must be at least 1, got %d", c.DefaultMaxTokens)
	case c.MaxBodyBytes < 1:
		return fmt.Errorf("max body bytes must be positive, got %d", c.MaxBodyBytes)
	case !(c.FailRate >= 0 && c.FailRate <= 1):
		return fmt.Errorf("fail rate must be within [0, 1], got %v", c.FailRate)
	case c.EmbeddingDim < 0:
		return fmt.Errorf("embedding dimensions must not be negative, got %d", c.EmbeddingDim)
	}
	if _, err := ParseFailMode(string(c.FailMode)); err != nil {
		return err
	}
	return nil
}

// Server answers the OpenAI API from the engine.
type Server struct {
	cfg     Config
	eng     *engine.Engine
	clk     clock.Clock
	m       *metrics
	sidecar *sidecarClient
	fail    failer
	sess    sessions
	ready   atomic.Bool
	idBase  string
	nextID  atomic.Int64
}

// New returns a server over eng; clk is clock.RealClock{} outside tests and must be the engine's.
func New(cfg Config, eng *engine.Engine, clk clock.Clock) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.EmbeddingDim == 0 {
		cfg.EmbeddingDim = DefaultEmbeddingDim
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	s := &Server{cfg: cfg, eng: eng, clk: clk, fail: failer{rate: cfg.FailRate}, idBase: hex.EncodeToString(b[:]),
		sess: sessions{clk: clk, last: map[string]time.Time{}}}
	s.m = newMetrics(cfg.Model, cfg.AgentClass, eng, clk)
	if cfg.SidecarURL != "" {
		s.sidecar = newSidecarClient(cfg.SidecarURL, s.m)
	}
	return s, nil
}

// SetReady flips /readyz.
func (s *Server) SetReady(ready bool) { s.ready.Store(ready) }

// ObserveWeightsLoad records how long reading the weights took.
func (s *Server) ObserveWeightsLoad(d time.Duration) { s.m.weightsLoadS.Set(d.Seconds()) }

// Handler serves the API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, true) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, false) })
	mux.HandleFunc("POST /v1/embeddings", s.embeddings)
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{map[string]any{
			"id": s.cfg.Model, "object": "model", "owned_by": "neuronetes", "max_model_len": s.eng.MaxTokens()}}})
	})
	mux.HandleFunc("POST /reset_prefix_cache", func(w http.ResponseWriter, r *http.Request) {
		// vLLM's endpoint of the same name: drops every cached block (AllBlocksCleared), refused
		// while a sequence holds cached blocks.
		if !s.eng.ResetPrefixCache() {
			http.Error(w, "the prefix cache is in use", http.StatusConflict)
			return
		}
		fmt.Fprintln(w, "ok")
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

// readRequest reads and validates the body; it answers the error itself and returns nil then.
func (s *Server) readRequest(w http.ResponseWriter, r *http.Request, chat bool) *completionRequest {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, &requestError{status: http.StatusRequestEntityTooLarge,
				message: fmt.Sprintf("request body is over %d bytes", s.cfg.MaxBodyBytes)})
			return nil
		}
		writeError(w, badRequest("", "reading the request body: %v", err))
		return nil
	}
	req, rerr := decodeRequest(body, chat, s.cfg.DefaultMaxTokens)
	if rerr != nil {
		writeError(w, rerr)
		return nil
	}
	return req
}

// prompt tokenizes the request, with the sidecar's stored turns first when there are any.
func (s *Server) prompt(r *http.Request, req *completionRequest, chat bool, conv string) []uint64 {
	if !chat {
		return tokenize.Append(nil, req.promptText)
	}
	msgs := req.Messages
	if s.remembers(chat, conv) {
		msgs = append(s.sidecar.turns(r.Context(), conv), msgs...)
	}
	return renderChat(msgs)
}

// remembers reports whether the conversation's turns are kept in the sidecar.
func (s *Server) remembers(chat bool, conv string) bool {
	return s.sidecar != nil && conv != "" && chat
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request, chat bool) {
	start := s.clk.Now()
	req := s.readRequest(w, r, chat)
	if req == nil {
		return
	}
	conv := conversationID(r, req)
	s.m.sessionsGauge.Set(float64(s.sess.touch(conv)))
	prompt := s.prompt(r, req, chat, conv)
	gen, rerr := s.plan(req, chat)
	if rerr != nil {
		writeError(w, rerr)
		return
	}
	fail := s.fail.next()
	if fail && s.cfg.FailMode == FailStatus {
		s.injected(FailStatus)
		writeError(w, &requestError{status: http.StatusInternalServerError, message: "injected failure (--fail-mode=status)"})
		return
	}
	seq, err := s.eng.Add(prompt, gen.tokens)
	if err != nil {
		param := "messages"
		if !chat {
			param = "prompt"
		}
		writeError(w, badRequest(param, "This model's maximum context length is %d tokens; the request has %d prompt tokens and asks for up to %d more",
			s.eng.MaxTokens(), len(prompt), gen.tokens))
		return
	}
	defer seq.Abort() // frees the slot on every early return (no-op after Finish)
	if s.remembers(chat, conv) {
		last := req.Messages[len(req.Messages)-1]
		s.sidecar.appendTurn(r.Context(), conv, last.Role, last.text)
	}

	out := s.newResponder(w, req, chat, gen)
	if req.Stream {
		out.begin()
	}
	if !s.generate(r.Context(), seq, out, gen, fail, start, chat, len(prompt)) {
		return
	}
	seq.Finish(gen.outputIDs())
	tm := seq.Timing()
	// The answer is stored before the response ends: a client that sends the next turn once it
	// has the last chunk ([DONE]) finds this one in the session, and a client that closes its
	// connection at [DONE] cannot cancel the store.
	if s.remembers(chat, conv) {
		s.sidecar.appendTurn(r.Context(), conv, "assistant", gen.text())
	}
	if !req.Stream && !tm.FirstToken.IsZero() {
		// A whole response's latency is no TTFT: report the first token's, as the gateway reads
		// it (gateway/proxy.HeaderTTFT).
		w.Header().Set(HeaderTTFT, strconv.FormatFloat(tm.FirstToken.Sub(start).Seconds(), 'f', 6, 64))
	}
	out.finish(usage{PromptTokens: len(prompt), CompletionTokens: gen.tokens, TotalTokens: len(prompt) + gen.tokens,
		PromptTokensDetails: &promptDetails{CachedTokens: tm.CachedTokens}, ContextTokens: len(prompt)})
	s.observeFinished(start, tm, gen, req.maxTokens())
}

// generate writes the tokens as they come due. It returns false when the request ended early:
// the client left, or an injected failure (fail) cut it after half the tokens.
func (s *Server) generate(ctx context.Context, seq *engine.Seq, out *responder, gen *generation, fail bool,
	start time.Time, chat bool, promptTokens int) bool {
	failAt := -1
	if fail {
		failAt = gen.tokens / 2
	}
	var last time.Time
	for i := 0; i < gen.tokens; i++ {
		if err := seq.WaitToken(ctx, i); err != nil {
			s.m.success.WithLabelValues("abort").Inc()
			return false
		}
		now := s.clk.Now()
		if i == 0 {
			s.observeFirstToken(start, now, chat, promptTokens)
		} else {
			s.m.itl.Observe(now.Sub(last).Seconds())
		}
		last = now
		if i == failAt {
			s.injected(s.cfg.FailMode)
			out.fail(s.cfg.FailMode) // FailDisconnect panics with http.ErrAbortHandler
			return false
		}
		if err := out.token(i); err != nil {
			s.m.success.WithLabelValues("abort").Inc()
			return false
		}
		s.m.genTokens.Inc()
		s.m.nnTokens.WithLabelValues("output").Inc()
		s.m.rate.add(1)
	}
	return true
}

func (s *Server) injected(mode FailMode) {
	s.m.injected.WithLabelValues(string(mode)).Inc()
	s.m.success.WithLabelValues("error").Inc()
}

func (s *Server) observeFirstToken(start, now time.Time, chat bool, promptTokens int) {
	ttft := now.Sub(start).Seconds()
	route := "completions"
	if chat {
		route = "chat"
	}
	s.m.ttft.Observe(ttft)
	s.m.nnTTFT.WithLabelValues(route).Observe(ttft)
	s.m.promptTokens.Add(float64(promptTokens))
	s.m.nnTokens.WithLabelValues("input").Add(float64(promptTokens))
}

func (s *Server) observeFinished(start time.Time, tm engine.Timing, gen *generation, maxTokens int) {
	end := s.clk.Now()
	s.m.success.WithLabelValues(gen.finishLabel()).Inc()
	s.m.e2e.Observe(end.Sub(start).Seconds())
	s.m.queue.Observe(tm.Admitted.Sub(tm.Arrived).Seconds())
	s.m.prefill.Observe(tm.FirstToken.Sub(tm.Admitted).Seconds())
	s.m.decode.Observe(end.Sub(tm.FirstToken).Seconds())
	s.m.inference.Observe(end.Sub(tm.Admitted).Seconds())
	s.m.reqPrompt.Observe(float64(tm.PromptTokens))
	s.m.reqGen.Observe(float64(gen.tokens))
	s.m.reqMax.Observe(float64(maxTokens))
}

// HeaderTTFT reports a non-streamed response's time to first token in seconds.
const HeaderTTFT = "X-Neuronetes-Ttft-Seconds"

func (s *Server) newID(chat bool) string {
	prefix := "cmpl-"
	if chat {
		prefix = "chatcmpl-"
	}
	return prefix + s.idBase + strconv.FormatInt(s.nextID.Add(1), 10)
}
