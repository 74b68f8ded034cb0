package main

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sidecarv1 "github.com/neuronetes/neuronetes/sidecar/api/v1"
	"github.com/neuronetes/neuronetes/sidecar/frame"
	"github.com/neuronetes/neuronetes/sidecar/keys"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
	"github.com/neuronetes/neuronetes/sidecar/server"
	"github.com/neuronetes/neuronetes/sidecar/store"
)

var words = strings.Fields(`the model agent user assistant tool call result context memory session token cache
vector search query answer question retrieve document page section summary plan step error retry latency
GPU node pod cluster scale warm cold request response stream chunk embedding score rank filter policy tenant`)

// chatJSON returns a seeded chat session of about size bytes.
func chatJSON(seed uint64, size int) []byte {
	rng := rand.New(rand.NewPCG(seed, 3))
	var b bytes.Buffer
	b.WriteString(`{"conversation_id":"bench","metadata":{"agent":"demo"},"turns":[`)
	for i := 0; b.Len() < size-120; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		role := []string{"user", "assistant"}[i%2]
		fmt.Fprintf(&b, `{"role":"%s","content":"`, role)
		for n := 8 + rng.IntN(40); n > 0; n-- {
			b.WriteString(words[rng.IntN(len(words))])
			if rng.IntN(9) == 0 {
				fmt.Fprintf(&b, " %d", rng.IntN(100000))
			}
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, `","ts":%d}`, 1764400000+i*7)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

type dist []time.Duration

func (d dist) pct(p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// interleave runs the named ops in alternating rounds so that machine noise
// hits baseline and subject alike, and returns each op's latencies.
func interleave(rounds, per int, ops []func() error) ([]dist, error) {
	out := make([]dist, len(ops))
	for range rounds {
		for i, op := range ops {
			for range per {
				start := time.Now()
				if err := op(); err != nil {
					return nil, err
				}
				out[i] = append(out[i], time.Since(start))
			}
		}
	}
	return out, nil
}

func us(d time.Duration) string { return fmt.Sprintf("%8.1f", float64(d.Nanoseconds())/1e3) }

// row is one line of the session table. A row's ratios are against the
// nearest baseline row above it (itself, for a baseline).
type row struct {
	name     string
	baseline bool
	op       func() error
}

// benchSessions runs the session table; sidecarBin, when not empty, is the
// sidecar binary, measured as its own process too.
func benchSessions(sidecarBin string) error {
	dir, err := os.MkdirTemp("", "sidecar-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rs, err := redistest.StartIn(dir, redistest.Options{})
	if err != nil {
		return err
	}
	defer rs.Kill()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := make([]byte, keys.KeySize)
	_, _ = crand.Read(key)
	ring, _ := keys.NewRing("k1", map[string][]byte{"k1": key})
	newCodec := func(c frame.Compression) (*frame.Codec, error) {
		return frame.New(ring, frame.Options{Tenant: "bench", Compression: c, UseDict: true}) // --zstd-dict defaults to true
	}
	codec, err := newCodec(frame.CompressZstd) // the sidecar's default
	if err != nil {
		return err
	}
	s2codec, err := newCodec(frame.CompressS2)
	if err != nil {
		return err
	}
	ropts := &redis.Options{Addr: rs.Addr, MaxRetries: -1}
	raw := redis.NewClient(ropts)
	defer raw.Close()
	mkStore := func(c *frame.Codec, near int) (*store.Store, error) {
		st, err := store.New(redis.NewClient(ropts), c, store.Options{NearCacheBytes: near, NearCacheMaxAge: time.Hour, RefreshOnRead: true})
		if err != nil {
			return nil, err
		}
		go st.Run(ctx, 250*time.Millisecond) // as the sidecar does
		return st, nil
	}
	cold, err := mkStore(codec, 0)
	if err != nil {
		return err
	}
	s2Store, err := mkStore(s2codec, 0)
	if err != nil {
		return err
	}
	ncodec, err := newCodec(frame.CompressNone)
	if err != nil {
		return err
	}
	noneStore, err := mkStore(ncodec, 0)
	if err != nil {
		return err
	}
	hot, err := mkStore(codec, 64<<20)
	if err != nil {
		return err
	}
	coldSrv, hotSrv := server.New(cold, nil, nil, nil), server.New(hot, nil, nil, nil)
	// The sidecar's default engine (fasthttp) on TCP and on a unix socket,
	// and net/http (--http-engine=net) for comparison.
	serveFast := func(api *server.Server, network, addr string) (string, error) {
		l, err := net.Listen(network, addr)
		if err != nil {
			return "", err
		}
		fs := api.FastServer(ctx, 0)
		go func() { _ = fs.Serve(l) }()
		return "http://" + l.Addr().String(), nil
	}
	coldURL, err := serveFast(coldSrv, "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hotURL, err := serveFast(hotSrv, "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	sock := filepath.Join(dir, "sidecar.sock")
	if _, err := serveFast(coldSrv, "unix", sock); err != nil {
		return err
	}
	// The hop alone: a fasthttp server on loopback that answers GET with the
	// session's bytes from memory and reads and drops a PUT body. It is what
	// any out-of-process sidecar adds to the Redis call behind it, at least.
	echoURL, err := serveEcho(ctx, chatJSON(1, 16<<10))
	if err != nil {
		return err
	}
	netHTTP := httptest.NewServer(coldSrv.Handler())
	defer netHTTP.Close()
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	gs := grpc.NewServer()
	sidecarv1.RegisterSessionsServer(gs, coldSrv.GRPC())
	go func() { _ = gs.Serve(gl) }()
	defer gs.Stop()
	cc, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	gc := sidecarv1.NewSessionsClient(cc)
	time.Sleep(300 * time.Millisecond) // let the near cache subscribe

	doc := chatJSON(1, 16<<10)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	uc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	httpDo := func(c *http.Client, method, url string, body []byte) error {
		req, _ := http.NewRequest(method, url, bytes.NewReader(body))
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s %s: %d", method, url, resp.StatusCode)
		}
		return nil
	}
	// A lean HTTP/1.1 client (no per-connection goroutines) shows how much of
	// the hop is the client's: agents in other languages differ here too.
	fc := &fasthttp.Client{}
	leanDo := func(method, url string, body []byte) error {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI(url)
		req.Header.SetMethod(method)
		if body != nil {
			req.SetBodyRaw(body)
		}
		if err := fc.Do(req, resp); err != nil {
			return err
		}
		if resp.StatusCode() != 200 {
			return fmt.Errorf("%s %s: %d", method, url, resp.StatusCode())
		}
		return nil
	}
	for _, st := range []*store.Store{cold, s2Store, noneStore} {
		if _, err := st.Put(ctx, "s16k", doc, -1, 0); err != nil {
			return err
		}
	}
	if err := raw.Set(ctx, "raw16k", doc, 24*time.Hour).Err(); err != nil {
		return err
	}
	rounds, per := envInt("NN_BENCH_ROUNDS", 10), envInt("NN_BENCH_OPS", 200)
	var procRows []row
	if sidecarBin != "" {
		// The binary as deployed: GOMAXPROCS=2 as the webhook injects it,
		// with the near cache off and on, and with GOMAXPROCS=1 for
		// comparison; all tenants of the same redis-server.
		var procs []*sidecarProc
		for _, p := range []struct {
			ns               string
			near, gomaxprocs int
		}{{"bench-proc", 0, 2}, {"bench-proc-near", 64 << 20, 2}, {"bench-proc-gmp1", 0, 1}} {
			sp, err := startSidecarProc(ctx, sidecarBin, dir, p.ns, rs.Addr, key, p.near, p.gomaxprocs)
			if err != nil {
				return err
			}
			defer sp.stop()
			if err := httpDo(hc, "PUT", sp.url+"/v1/sessions/s16k", doc); err != nil {
				return err
			}
			procs = append(procs, sp)
		}
		two, near, one := procs[0].url, procs[1].url, procs[2].url
		procRows = []row{
			{"HTTP GET, sidecar process, cache off", false, func() error { return httpDo(hc, "GET", two+"/v1/sessions/s16k", nil) }},
			{"HTTP GET, sidecar process, lean client", false, func() error { return leanDo("GET", two+"/v1/sessions/s16k", nil) }},
			{"HTTP GET, sidecar process, GOMAXPROCS=1, lean", false, func() error { return leanDo("GET", one+"/v1/sessions/s16k", nil) }},
			{"HTTP GET, sidecar process, near-cache hit", false, func() error { return httpDo(hc, "GET", near+"/v1/sessions/s16k", nil) }},
			{"HTTP PUT, sidecar process", false, func() error { return httpDo(hc, "PUT", two+"/v1/sessions/w16k-proc", doc) }},
			{"HTTP PUT, sidecar process, lean client", false, func() error { return leanDo("PUT", two+"/v1/sessions/w16k-proc-lean", doc) }},
			{"HTTP PUT, sidecar process, GOMAXPROCS=1, lean", false, func() error { return leanDo("PUT", one+"/v1/sessions/w16k-proc-lean", doc) }},
		}
	}
	rows := []row{
		{"raw go-redis GET (baseline)", true, func() error { return raw.Get(ctx, "raw16k").Err() }},
		{hopGet, false, func() error { return httpDo(hc, "GET", echoURL+"/v1/sessions/s16k", nil) }},
		{hopGetLean, false, func() error { return leanDo("GET", echoURL+"/v1/sessions/s16k", nil) }},
		{"HTTP GET, near cache off", false, func() error { return httpDo(hc, "GET", coldURL+"/v1/sessions/s16k", nil) }},
		{"HTTP/unix GET, near cache off", false, func() error { return httpDo(uc, "GET", "http://sidecar/v1/sessions/s16k", nil) }},
		{"HTTP GET, lean client, cache off", false, func() error { return leanDo("GET", coldURL+"/v1/sessions/s16k", nil) }},
		{"HTTP GET, net/http engine, cache off", false, func() error { return httpDo(hc, "GET", netHTTP.URL+"/v1/sessions/s16k", nil) }},
		{"gRPC Get, near cache off", false, func() error {
			_, err := gc.Get(ctx, &sidecarv1.GetRequest{ConversationId: "s16k"})
			return err
		}},
		{"HTTP GET, near-cache hit", false, func() error { return httpDo(hc, "GET", hotURL+"/v1/sessions/s16k", nil) }},
		{"store.Get in-process, near cache off", false, func() error { _, err := cold.Get(ctx, "s16k"); return err }},
		{"store.Get in-process, s2, cache off", false, func() error { _, err := s2Store.Get(ctx, "s16k"); return err }},
		{"store.Get in-process, no compression", false, func() error { _, err := noneStore.Get(ctx, "s16k"); return err }},
		{"store.Get in-process, near-cache hit", false, func() error { _, err := hot.Get(ctx, "s16k"); return err }},
	}
	if len(procRows) > 0 {
		rows = append(rows, procRows[:4]...)
	}
	rows = append(rows, []row{
		{"raw go-redis SET (baseline)", true, func() error { return raw.Set(ctx, "raw16k", doc, 24*time.Hour).Err() }},
		{hopPut, false, func() error { return httpDo(hc, "PUT", echoURL+"/v1/sessions/w16k", doc) }},
		{hopPutLean, false, func() error { return leanDo("PUT", echoURL+"/v1/sessions/w16k", doc) }},
		{"HTTP PUT", false, func() error { return httpDo(hc, "PUT", coldURL+"/v1/sessions/w16k", doc) }},
		{"HTTP/unix PUT", false, func() error { return httpDo(uc, "PUT", "http://sidecar/v1/sessions/w16k-unix", doc) }},
		{"HTTP PUT, lean client", false, func() error { return leanDo("PUT", coldURL+"/v1/sessions/w16k-lean", doc) }},
		{"HTTP PUT, net/http engine", false, func() error { return httpDo(hc, "PUT", netHTTP.URL+"/v1/sessions/w16k-net", doc) }},
		{"gRPC Put", false, func() error {
			_, err := gc.Put(ctx, &sidecarv1.PutRequest{ConversationId: "w16k-grpc", Data: doc})
			return err
		}},
		{"store.Put in-process", false, func() error { _, err := cold.Put(ctx, "w16k-store", doc, -1, 0); return err }},
		{"store.Put in-process, s2", false, func() error { _, err := s2Store.Put(ctx, "w16k-s2", doc, -1, 0); return err }},
		{"store.Put in-process, no compression", false, func() error { _, err := noneStore.Put(ctx, "w16k-none", doc, -1, 0); return err }},
	}...)
	if len(procRows) > 0 {
		rows = append(rows, procRows[4:]...)
	}
	if err := raw.ConfigResetStat(ctx).Err(); err != nil {
		return err
	}
	ops := make([]func() error, len(rows))
	for i, r := range rows {
		ops[i] = r.op
	}
	res, err := interleave(rounds, per, ops)
	if err != nil {
		return err
	}
	fmt.Printf("session ops, %d-byte JSON session, one client, %d x %d interleaved ops each, redis-server on loopback\n", len(doc), rounds, per)
	fmt.Printf("  %-40s %9s %9s %9s %9s\n", "op", "p50 µs", "p99 µs", "p50 x", "p99 x")
	hit, base, at := 0, res[0], map[string]dist{}
	for i, r := range rows {
		if r.baseline {
			base = res[i]
		}
		if r.name == "store.Get in-process, near-cache hit" {
			hit = i
		}
		at[r.name] = res[i]
		fmt.Printf("  %-40s %s %s %9.2f %9.2f\n", r.name, us(res[i].pct(0.5)), us(res[i].pct(0.99)),
			float64(res[i].pct(0.5))/float64(base.pct(0.5)), float64(res[i].pct(0.99))/float64(base.pct(0.99)))
	}
	fmt.Printf("  target: sidecar <= 1.3x raw go-redis; near-cache hit p99 <= 20 µs (measured %s µs in-process)\n", strings.TrimSpace(us(res[hit].pct(0.99))))
	printFloor(at)
	if err := printCommandStats(ctx, raw); err != nil {
		return err
	}
	fmt.Printf("  (sidecar defaults: fasthttp engine, zstd + JSON dictionary below 4 KiB; clients: Go net/http unless \"lean\" (fasthttp.Client);\n")
	fmt.Printf("   \"net/http engine\" = --http-engine=net, \"s2\" / \"no compression\" = --compression=s2 / none)\n")
	return benchFrames(ring)
}

// printCommandStats prints Redis's own CPU per call of the commands the
// rows used (INFO commandstats since the rows started): the server-side
// share of each row, apart from the network and the clients.
func printCommandStats(ctx context.Context, rdb *redis.Client) error {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return err
	}
	var parts []string
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		cmd, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd || !slices.Contains([]string{"get", "set", "hmget", "pttl", "evalsha"}, cmd) {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "usec_per_call="); ok {
				parts = append(parts, strings.ToUpper(cmd)+" "+v)
			}
		}
	}
	slices.Sort(parts)
	fmt.Printf("  Redis CPU µs per call (INFO commandstats; EVALSHA = the put script): %s\n", strings.Join(parts, ", "))
	return nil
}

// benchFrames reports sealed frame sizes and seal times per codec, with and
// without the JSON dictionary.
func benchFrames(ring *keys.Ring) error {
	type variant struct {
		name string
		c    *frame.Codec
	}
	var vs []variant
	for _, comp := range []frame.Compression{frame.CompressS2, frame.CompressZstd} {
		for _, dict := range []bool{false, true} {
			c, err := frame.New(ring, frame.Options{Tenant: "bench", Compression: comp, UseDict: dict})
			if err != nil {
				return err
			}
			name := string(comp)
			if dict {
				name += "+dict"
			}
			vs = append(vs, variant{name, c})
		}
	}
	fmt.Printf("\nframe bytes and seal µs (compression + AES-GCM), mean over 200 seeded sessions per size\n")
	fmt.Printf("  %-8s", "json")
	for _, v := range vs {
		fmt.Printf(" %10s %6s", v.name, "µs")
	}
	fmt.Println()
	for _, size := range []int{256, 1024, 4096, 16384} {
		n, plain := 200, 0
		bytesOf, took := make([]int, len(vs)), make([]time.Duration, len(vs))
		for s := range n {
			doc := chatJSON(uint64(s+10), size)
			plain += len(doc)
			b := frame.Binding{Kind: "sess", ID: "x"}
			for i, v := range vs { // interleaved, so load hits every codec alike
				t0 := time.Now()
				f, err := v.c.Seal(b, doc)
				took[i] += time.Since(t0)
				if err != nil {
					return fmt.Errorf("seal %s: %w", v.name, err)
				}
				bytesOf[i] += len(f)
			}
		}
		fmt.Printf("  %-8d", plain/n)
		for i := range vs {
			fmt.Printf(" %10d %6.1f", bytesOf[i]/n, float64(took[i].Nanoseconds())/float64(n)/1e3)
		}
		fmt.Println()
	}
	return nil
}

// Row names of the hop-only rows, which printFloor reads back.
const (
	hopGet     = "loopback hop only, GET (no Redis)"
	hopGetLean = "loopback hop only, GET, lean client"
	hopPut     = "loopback hop only, PUT (no Redis)"
	hopPutLean = "loopback hop only, PUT, lean client"
)

// serveEcho starts the hop-only server: GET answers body, anything else
// reads the request body and answers 200 with no body.
func serveEcho(ctx context.Context, body []byte) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	fs := &fasthttp.Server{Handler: func(c *fasthttp.RequestCtx) {
		if c.IsGet() {
			c.SetContentType("application/json")
			c.SetBody(body)
			return
		}
		_ = c.PostBody()
	}}
	go func() { _ = fs.Serve(l) }()
	go func() { <-ctx.Done(); _ = fs.Shutdown() }()
	return "http://" + l.Addr().String(), nil
}

// printFloor prints what the hop-only rows leave of the 1.3x budget, and the
// floor of this sidecar's design: the hop plus the in-process store call (its
// Redis round trip and frame codec), at p50, as ratios to the raw call.
func printFloor(at map[string]dist) {
	p50 := func(name string) float64 { return float64(at[name].pct(0.5)) }
	const rawGet, rawSet = "raw go-redis GET (baseline)", "raw go-redis SET (baseline)"
	const storeGet, storePut = "store.Get in-process, near cache off", "store.Put in-process"
	fmt.Printf("  hop alone / raw: GET %.2fx (lean client %.2fx), PUT %.2fx (lean client %.2fx); left of the 1.3x budget for Redis and the codec: GET %.2fx, PUT %.2fx (lean)\n",
		p50(hopGet)/p50(rawGet), p50(hopGetLean)/p50(rawGet), p50(hopPut)/p50(rawSet), p50(hopPutLean)/p50(rawSet),
		1.3-p50(hopGetLean)/p50(rawGet), 1.3-p50(hopPutLean)/p50(rawSet))
	fmt.Printf("  floor of this design (hop-only + in-process store call) / raw: GET %.2fx (lean client %.2fx), PUT %.2fx (lean client %.2fx)\n",
		(p50(hopGet)+p50(storeGet))/p50(rawGet), (p50(hopGetLean)+p50(storeGet))/p50(rawGet),
		(p50(hopPut)+p50(storePut))/p50(rawSet), (p50(hopPutLean)+p50(storePut))/p50(rawSet))
}
