package engine

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/openai"
)

// discardSink is a client that takes every event and keeps nothing.
type discardSink struct{ events int }

func (s *discardSink) Start(Meta) error                     { return nil }
func (s *discardSink) Event([]byte) error                   { s.events++; return nil }
func (s *discardSink) Finish() error                        { return nil }
func (s *discardSink) Response(Meta, []byte) error          { return nil }
func (s *discardSink) Fail(Meta, *openai.Error, bool) error { return nil }

// relayChunks is the number of token chunks each benchmarked stream carries.
const relayChunks = 1000

// BenchmarkRelayStream measures the engine's cost per streamed chunk (the relay loop, SSE
// parsing, usage counting, first-token metrics, the idle timer) with no response filters: one
// op is one streamed request of relayChunks token chunks from a backend that writes them all at
// once; ns/chunk and allocs/chunk are reported. Run with -benchmem.
func BenchmarkRelayStream(b *testing.B) { benchRelay(b, "") }

// BenchmarkRelayStreamUsage is BenchmarkRelayStream with the client asking for usage, so the
// backend's last chunk carries it and the relay decodes it.
func BenchmarkRelayStreamUsage(b *testing.B) {
	benchRelay(b, `,"stream_options":{"include_usage":true}`)
}

func benchRelay(b *testing.B, extra string) {
	var sb strings.Builder
	sb.WriteString("data: " + chunkJSON("", "") + "\n\n") // the role chunk: no token
	for i := 0; i < relayChunks; i++ {
		sb.WriteString("data: " + chunkJSON(fmt.Sprintf("tok%d ", i), "") + "\n\n")
	}
	sb.WriteString(`data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1000,"total_tokens":1003}}` + "\n\n")
	sb.WriteString("data: [DONE]\n\n")
	payload := []byte(sb.String())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(payload)
	}))
	defer srv.Close()
	bk := &backend{srv: srv, name: strings.TrimPrefix(srv.URL, "http://")}
	h := newHarness(&testing.T{}, bk)
	body := []byte(fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"hello there"}]%s}`, relayChunks, extra))
	t := tenant("bench", access.Quota{})
	ctx := context.Background()
	run := func() {
		s := &discardSink{}
		h.e.Handle(ctx, Inbound{Route: openai.RouteChat, Header: http.Header{}, Body: body, Protocol: "http", Tenant: t}, s)
		if s.events < relayChunks {
			b.Fatalf("%d events, want at least %d", s.events, relayChunks)
		}
	}
	run() // warm: connection, metric series
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run()
	}
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	n := float64(b.N * relayChunks)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/chunk")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/n, "allocs/chunk")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/n, "B/chunk")
}
