package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/affinity"
	"github.com/neuronetes/neuronetes/gateway/metrics"
	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/pick"
	"github.com/neuronetes/neuronetes/gateway/proxy"
	"github.com/neuronetes/neuronetes/gateway/quota"
	"github.com/neuronetes/neuronetes/gateway/route"
)

// backend is a fake model server.
type backend struct {
	srv  *httptest.Server
	name string
	mu   sync.Mutex
	reqs []seen
	// handle answers a request; default: stream n tokens.
	handle func(w http.ResponseWriter, r *http.Request, body map[string]any)
}

type seen struct {
	header http.Header
	body   map[string]any
	raw    []byte
}

func newBackend(t *testing.T) *backend {
	b := &backend{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		b.mu.Lock()
		b.reqs = append(b.reqs, seen{r.Header.Clone(), body, raw})
		h := b.handle
		b.mu.Unlock()
		if h == nil {
			h = streamTokens(3, 0)
		}
		h(w, r, body)
	}))
	b.name = strings.TrimPrefix(b.srv.URL, "http://")
	t.Cleanup(b.srv.Close)
	return b
}

func (b *backend) set(h func(w http.ResponseWriter, r *http.Request, body map[string]any)) {
	b.mu.Lock()
	b.handle = h
	b.mu.Unlock()
}

func (b *backend) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.reqs)
}

func (b *backend) last() seen {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reqs[len(b.reqs)-1]
}

func chunkJSON(content string, finish string) string {
	fr := "null"
	if finish != "" {
		fr = `"` + finish + `"`
	}
	c, _ := json.Marshal(content)
	return `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":` + string(c) + `},"finish_reason":` + fr + `}]}`
}

// streamTokens streams n tokens "t0 ".."t{n-1} " with gap between them, then usage when asked,
// then [DONE].
func streamTokens(n int, gap time.Duration) func(http.ResponseWriter, *http.Request, map[string]any) {
	return func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		if s, _ := body["stream"].(bool); !s {
			w.Header().Set("Content-Type", "application/json")
			var b strings.Builder
			for i := 0; i < n; i++ {
				fmt.Fprintf(&b, "t%d ", i)
			}
			c, _ := json.Marshal(b.String())
			fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":%s},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":%d,"total_tokens":%d}}`, c, n, n+7)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i := 0; i < n; i++ {
			if i > 0 && gap > 0 {
				select {
				case <-time.After(gap):
				case <-r.Context().Done():
					return
				}
			}
			fin := ""
			if i == n-1 {
				fin = "stop"
			}
			fmt.Fprintf(w, "data: %s\n\n", chunkJSON(fmt.Sprintf("t%d ", i), fin))
			f.Flush()
		}
		if so, _ := body["stream_options"].(map[string]any); so != nil && so["include_usage"] == true {
			fmt.Fprintf(w, `data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", n, n+7)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
		f.Flush()
	}
}

// sink records a response.
type sink struct {
	mu       sync.Mutex
	meta     Meta
	started  bool
	events   []string
	finished bool
	body     string
	err      *openai.Error
	errAfter bool
	first    chan struct{}
	onEvent  func()
	// gone, when set, makes every write after the first gone events (and a whole response when
	// gone is 0) fail: the client went away.
	gone *int
}

var errClientGone = errors.New("write: broken pipe")

func newSink() *sink { return &sink{first: make(chan struct{})} }

func (s *sink) Start(m Meta) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.meta, s.started = m, true
	return nil
}

func (s *sink) Event(d []byte) error {
	s.mu.Lock()
	if s.gone != nil && len(s.events) >= *s.gone {
		s.mu.Unlock()
		return errClientGone
	}
	s.events = append(s.events, string(d))
	n := len(s.events)
	f := s.onEvent
	s.mu.Unlock()
	if n == 1 {
		close(s.first)
	}
	if f != nil {
		f()
	}
	return nil
}

func (s *sink) Finish() error { s.mu.Lock(); s.finished = true; s.mu.Unlock(); return nil }
func (s *sink) Response(m Meta, b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone != nil {
		return errClientGone
	}
	s.meta, s.body = m, string(b)
	return nil
}
func (s *sink) Fail(m Meta, e *openai.Error, started bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.meta, s.err, s.errAfter = m, e, started
	return nil
}

// text joins the streamed contents.
func (s *sink) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, e := range s.events {
		c, err := openai.ParseChunk([]byte(e))
		if err != nil {
			continue
		}
		for _, ch := range c.Choices {
			b.WriteString(ch.Content())
		}
	}
	return b.String()
}

type harness struct {
	e    *Engine
	reg  *prometheus.Registry
	pool *route.Pool
}

// newHarness builds an engine over one static pool of the backends.
func newHarness(t *testing.T, bs ...*backend) *harness {
	t.Helper()
	reg := prometheus.NewRegistry()
	p := &route.Pool{Ref: route.PoolRef{Namespace: "ns", Name: "pool"}, AgentClass: "cls", Model: "m", Policy: route.DefaultPolicy()}
	for _, b := range bs {
		p.Endpoints = append(p.Endpoints, route.Endpoint{Pod: b.name, Addr: b.name})
	}
	table := route.NewTable(route.NewSnapshot([]*route.Pool{p}))
	e := &Engine{Table: table, Pins: &affinity.Store{Mem: affinity.NewMemory(0, nil)},
		Picker:    &pick.Picker{Load: pick.NewLoad(), Prefix: pick.NewPrefixIndex(16, 1000)},
		Quota:     &quota.Limiter{Store: quota.NewMemory()},
		Admission: quota.NewAdmission(), Upstream: proxy.NewUpstream(proxy.Timeouts{FirstToken: 2 * time.Second, Idle: time.Second}),
		Metrics: metrics.New(reg), Pools: metrics.NewPoolStats()}
	e.Init()
	return &harness{e: e, reg: reg, pool: p}
}

// tenant is an authenticated tenant of namespace ns allowed model "m".
func tenant(name string, q access.Quota) *access.Tenant {
	return &access.Tenant{Name: name, Namespace: "ns", Models: map[string]bool{"m": true}, Quota: q,
		Priorities: map[route.Priority]bool{route.PriorityHigh: true}}
}

func (h *harness) do(ctx context.Context, t *access.Tenant, hdr map[string]string, body string) *sink {
	s := newSink()
	hh := http.Header{}
	for k, v := range hdr {
		hh.Set(k, v)
	}
	h.e.Handle(ctx, Inbound{Route: openai.RouteChat, Header: hh, Body: []byte(body), Protocol: "http", Tenant: t}, s)
	return s
}

func chat(stream bool, extra string) string {
	return fmt.Sprintf(`{"model":"m","stream":%v,"max_tokens":8,"messages":[{"role":"user","content":"hello there"}]%s}`, stream, extra)
}

// counters asserts that nothing is held: load, in-flight gauge, queued tokens, admission.
func (h *harness) assertReleased(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		load := h.e.Picker.Load.Total()
		gauge := testutil.ToFloat64(h.e.Metrics.InFlight.WithLabelValues("ns/pool"))
		queued := h.e.Pools.Queued(h.pool.Ref)
		adm := h.e.Admission.Queued(h.pool.Ref)
		admitted := h.e.Admission.InFlight(h.pool.Ref)
		if load == 0 && gauge == 0 && len(queued) == 0 && len(adm) == 0 && admitted == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("counters not released: load %d, in-flight gauge %v, queued tokens %v, admission queue %v, admitted %d",
				load, gauge, queued, adm, admitted)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// scopedKey is the key the engine keeps t's session k under.
func scopedKey(e *Engine, t *access.Tenant, k string) string { return e.Sessions.Scope(t, k) }

// anyone is a tenant of the test pool's namespace allowed every model.
var anyone = &access.Tenant{Name: "anyone", Namespace: "ns", AllModels: true}
