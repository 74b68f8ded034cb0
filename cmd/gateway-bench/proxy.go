package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/neuronetes/neuronetes/internal/exectrace"
	"github.com/neuronetes/neuronetes/internal/serving"
)

// The baseline proxies run as their own processes (this binary's "proxy" mode), like the
// gateway, so every column pays the same process hop and CPU contention.

// Proxy policies.
const (
	policyRR     = "round-robin"
	policyLeast  = "least-request"
	policyRandom = "random"
	policyTCP    = "tcp-relay" // a layer-4 relay: the floor any proxy process puts on this machine
	// policyReference is the bench's own cache- and load-aware router (reference.go): what
	// such routing achieves on this harness, shown next to the gateway but not a target.
	policyReference = "prefix-reference"
)

// ticket is one request's routing: the backend picked and the prefill work the picker booked.
type ticket struct {
	backend int
	prefill int  // estimated prompt tokens to compute (the reference policy only)
	settled bool // prefill released
}

// picker chooses a backend for each request (body is nil for the TCP relay), is told when the
// backend's first response byte arrives (its prefill is over), and when the request ends.
type picker interface {
	pick(body []byte) *ticket
	started(t *ticket)
	done(t *ticket)
}

type roundRobin struct {
	n    int
	next atomic.Uint64
}

func (p *roundRobin) pick([]byte) *ticket {
	return &ticket{backend: int((p.next.Add(1) - 1) % uint64(p.n))}
}
func (p *roundRobin) started(*ticket) {}
func (p *roundRobin) done(*ticket)    {}

type randomPick struct{ n int }

func (p *randomPick) pick([]byte) *ticket { return &ticket{backend: rand.IntN(p.n)} }
func (p *randomPick) started(*ticket)     {}
func (p *randomPick) done(*ticket)        {}

// leastRequest picks the backend with the fewest requests in flight through this proxy; ties go
// to the first one after the previous pick, so equal backends share the load.
type leastRequest struct {
	mu       sync.Mutex
	inflight []int
	last     int
}

func (p *leastRequest) pick([]byte) *ticket {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.inflight)
	best := -1
	for k := 1; k <= n; k++ {
		i := (p.last + k) % n
		if best < 0 || p.inflight[i] < p.inflight[best] {
			best = i
		}
	}
	p.inflight[best]++
	p.last = best
	return &ticket{backend: best}
}

func (p *leastRequest) started(*ticket) {}

func (p *leastRequest) done(t *ticket) {
	p.mu.Lock()
	p.inflight[t.backend]--
	p.mu.Unlock()
}

func newPicker(policy string, n int, ref refConfig) (picker, error) {
	switch policy {
	case policyReference:
		return newReference(n, ref)

	case policyRR, policyTCP:
		return &roundRobin{n: n}, nil
	case policyLeast:
		return &leastRequest{inflight: make([]int, n), last: n - 1}, nil
	case policyRandom:
		return &randomPick{n: n}, nil
	}
	return nil, fmt.Errorf("-policy %q is not one of %s, %s, %s, %s, %s", policy, policyRR, policyLeast, policyRandom, policyTCP, policyReference)
}

type ticketKey struct{}

// firstRead calls started at the first bytes of a backend's response body.
type firstRead struct {
	io.ReadCloser
	once func()
}

func (f *firstRead) Read(b []byte) (int, error) {
	n, err := f.ReadCloser.Read(b)
	if n > 0 && f.once != nil {
		f.once()
		f.once = nil
	}
	return n, err
}

// reverseProxy is Go's httputil.ReverseProxy over the backends, flushing every write (SSE).
func reverseProxy(backends []*url.URL, pk picker) http.Handler {
	tr := &http.Transport{
		Proxy: nil, DialContext: (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns: 2048, MaxIdleConnsPerHost: 1024, IdleConnTimeout: 90 * time.Second, DisableCompression: true,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(backends[r.In.Context().Value(ticketKey{}).(*ticket).backend])
		},
		ModifyResponse: func(res *http.Response) error {
			t := res.Request.Context().Value(ticketKey{}).(*ticket)
			res.Header.Set("X-Neuronetes-Pod", backends[t.backend].Host) // as the gateway names the pod
			res.Body = &firstRead{ReadCloser: res.Body, once: func() { pk.started(t) }}
			return nil
		},
		Transport:     tr,
		FlushInterval: -1,
		ErrorLog:      log.New(os.Stderr, "reverseproxy: ", log.LstdFlags),
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The request body is read whole first: an HTTP/1 server closes the inbound body when the
		// response starts, and a backend that answers headers before the transport's last read of
		// the streamed body would otherwise have its connection torn down (golang/go#40747).
		body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
		if err != nil {
			http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		t := pk.pick(body)
		defer pk.done(t)
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ticketKey{}, t)))
	})
}

// tcpRelay copies bytes between each client connection and a backend picked per connection.
func tcpRelay(l net.Listener, backends []string, pk picker) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			t := pk.pick(nil)
			defer pk.done(t)
			b, err := net.DialTimeout("tcp", backends[t.backend], 5*time.Second)
			if err != nil {
				return
			}
			defer b.Close()
			go func() {
				_, _ = io.Copy(b, c)
				if tc, ok := b.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}()
			_, _ = io.Copy(c, b)
		}()
	}
}

// proxyMain is `gateway-bench proxy`: one baseline proxy process.
func proxyMain(args []string) error {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "listen address")
	list := fs.String("backends", "", "comma-separated backend base URLs")
	policy := fs.String("policy", policyRR, "round-robin, least-request, random, tcp-relay, or prefix-reference")
	var ref refConfig
	fs.IntVar(&ref.kvTokens, "kv-tokens", 1<<20, "prefix-reference: each backend's KV cache tokens")
	fs.IntVar(&ref.blockSize, "block-size", 16, "prefix-reference: each backend's KV block size")
	traceFile := fs.String("trace-file", "", "write a Go execution trace of this process to this file, ended at SIGTERM (empty: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var urls []*url.URL
	var hosts []string
	for _, s := range strings.Split(*list, ",") {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || u.Host == "" {
			return fmt.Errorf("-backends: %q is not a base URL", s)
		}
		urls = append(urls, u)
		hosts = append(hosts, u.Host)
	}
	pk, err := newPicker(*policy, len(urls), ref)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	stopTrace, err := exectrace.Start(*traceFile)
	if err != nil {
		return err
	}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		if err := stopTrace(); err != nil {
			fmt.Fprintln(os.Stderr, "gateway-bench proxy:", err)
		}
		os.Exit(0)
	}()
	if *policy == policyTCP {
		return tcpRelay(l, hosts, pk)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.Handle("/", reverseProxy(urls, pk))
	return serving.Stream(0).Server("", mux).Serve(l)
}
