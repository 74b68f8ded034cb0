package front

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neuronetes/neuronetes/gateway/affinity"
	"github.com/neuronetes/neuronetes/gateway/engine"
	"github.com/neuronetes/neuronetes/gateway/kvindex"
	"github.com/neuronetes/neuronetes/gateway/metrics"
	"github.com/neuronetes/neuronetes/gateway/pick"
	"github.com/neuronetes/neuronetes/gateway/proxy"
	"github.com/neuronetes/neuronetes/gateway/quota"
	"github.com/neuronetes/neuronetes/gateway/route"
)

// BenchmarkStreamChunk measures the gateway's cost per streamed chunk: a backend writing 100
// chunks as fast as it can, through the full front and engine, read by a client. Reported per
// chunk; compare against BenchmarkStreamChunkDirect for the backend and client's own share.
func BenchmarkStreamChunk(b *testing.B)       { benchStream(b, true) }
func BenchmarkStreamChunkDirect(b *testing.B) { benchStream(b, false) }

func benchStream(b *testing.B, viaGateway bool) {
	chunk := `{"choices":[{"delta":{"content":"tok "},"finish_reason":null,"index":0,"logprobs":null}],"created":1,"id":"chatcmpl-1","model":"m","object":"chat.completion.chunk"}`
	back := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i := 0; i < 100; i++ {
			fmt.Fprintf(w, "data: %s\n\n", chunk)
			f.Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	})}
	bl, _ := net.Listen("tcp", "127.0.0.1:0")
	go back.Serve(bl)
	defer back.Close()
	addr := bl.Addr().String()
	base := "http://" + addr
	if viaGateway {
		pool := &route.Pool{Ref: route.PoolRef{Name: "static"}, Policy: route.DefaultPolicy(), Endpoints: []route.Endpoint{{Pod: addr, Addr: addr}}}
		e := &engine.Engine{Table: route.NewTable(route.NewStaticSnapshot(pool)), Pins: &affinity.Store{Mem: affinity.NewMemory(0, nil)},
			Picker: &pick.Picker{Load: pick.NewLoad(), Prefix: pick.NewPrefixIndex(256, 1<<17)}, Admission: quota.NewAdmission(),
			Quota: &quota.Limiter{Store: quota.NewMemory()}, Upstream: proxy.NewUpstream(proxy.Timeouts{}),
			Metrics: metrics.New(prometheus.NewRegistry()), Pools: metrics.NewPoolStats()}
		e.Init()
		s := &Server{Engine: e}
		s.Init()
		gl, _ := net.Listen("tcp", "127.0.0.1:0")
		hs := s.HTTPServer("", nil)
		go hs.Serve(gl)
		defer hs.Close()
		base = "http://" + gl.Addr().String()
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}, Timeout: 10 * time.Second}
	body := `{"model":"m","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := hc.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		n := 0
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") {
				n++
			}
		}
		resp.Body.Close()
		if n != 101 {
			b.Fatalf("%d events", n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/chunk")
}

// BenchmarkLargePrompt measures the gateway's cost per request with a 40 KB prompt (the
// Mooncake trace's median is about 10,000 tokens): parsing, the prefix index, picking, proxying.
func BenchmarkLargePrompt(b *testing.B) { benchLargePrompt(b, false) }

// BenchmarkLargePromptKV is BenchmarkLargePrompt with the exact KV index's prompt hashing
// (--kv-events-hash=demo), as the routing bench runs the gateway.
func BenchmarkLargePromptKV(b *testing.B) { benchLargePrompt(b, true) }

func benchLargePrompt(b *testing.B, kv bool) {
	back := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"index\":0}],\"id\":\"x\"}\n\ndata: [DONE]\n\n")
	})}
	bl, _ := net.Listen("tcp", "127.0.0.1:0")
	go back.Serve(bl)
	defer back.Close()
	var eps []route.Endpoint
	eps = append(eps, route.Endpoint{Pod: bl.Addr().String(), Addr: bl.Addr().String()})
	pool := &route.Pool{Ref: route.PoolRef{Name: "static"}, Policy: route.DefaultPolicy(), Endpoints: eps}
	e := &engine.Engine{Table: route.NewTable(route.NewStaticSnapshot(pool)), Pins: &affinity.Store{Mem: affinity.NewMemory(0, nil)},
		Picker: &pick.Picker{Load: pick.NewLoad(), Prefix: pick.NewPrefixIndex(256, 1<<17)}, Admission: quota.NewAdmission(),
		Upstream: proxy.NewUpstream(proxy.Timeouts{}), Metrics: metrics.New(prometheus.NewRegistry()), Pools: metrics.NewPoolStats()}
	if kv {
		e.Picker.KV, e.KVPrompt = &kvindex.Index{}, kvindex.DemoPrompt
	}
	e.Init()
	s := &Server{Engine: e}
	s.Init()
	gl, _ := net.Listen("tcp", "127.0.0.1:0")
	hs := s.HTTPServer("", nil)
	go hs.Serve(gl)
	defer hs.Close()
	words := make([]string, 8000)
	for i := range words {
		words[i] = fmt.Sprintf("w%d", i)
	}
	prompt := strings.Join(words, " ")
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		body := fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":1,"messages":[{"role":"user","content":"%s %d"}]}`, prompt, i%50)
		resp, err := hc.Post("http://"+gl.Addr().String()+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
