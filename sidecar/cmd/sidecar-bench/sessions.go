package main

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

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

func benchSessions() error {
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
	ctx := context.Background()
	key := make([]byte, keys.KeySize)
	_, _ = crand.Read(key)
	ring, _ := keys.NewRing("k1", map[string][]byte{"k1": key})
	codec, err := frame.New(ring, frame.Options{Tenant: "bench", UseDict: true}) // the sidecar's default
	if err != nil {
		return err
	}
	ropts := &redis.Options{Addr: rs.Addr, MaxRetries: -1}
	raw := redis.NewClient(ropts)
	defer raw.Close()
	mk := func(near int) (*store.Store, *httptest.Server, error) {
		st, err := store.New(redis.NewClient(ropts), codec, store.Options{NearCacheBytes: near, NearCacheMaxAge: time.Hour, RefreshOnRead: true})
		if err != nil {
			return nil, nil, err
		}
		go st.Run(ctx, 250*time.Millisecond)
		return st, httptest.NewServer(server.New(st, nil, nil, nil).Handler()), nil
	}
	cold, coldHTTP, err := mk(0)
	if err != nil {
		return err
	}
	defer coldHTTP.Close()
	hot, hotHTTP, err := mk(64 << 20)
	if err != nil {
		return err
	}
	defer hotHTTP.Close()
	time.Sleep(300 * time.Millisecond) // let the near cache subscribe

	doc := chatJSON(1, 16<<10)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	httpDo := func(method, url string, body []byte) error {
		req, _ := http.NewRequest(method, url, bytes.NewReader(body))
		resp, err := hc.Do(req)
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
	if _, err := cold.Put(ctx, "s16k", doc, -1, 0); err != nil {
		return err
	}
	if err := raw.Set(ctx, "raw16k", doc, 24*time.Hour).Err(); err != nil {
		return err
	}
	rounds, per := envInt("NN_BENCH_ROUNDS", 10), envInt("NN_BENCH_OPS", 200)
	names := []string{
		"raw go-redis GET (baseline)",
		"sidecar HTTP GET, near cache off",
		"sidecar HTTP GET, near-cache hit",
		"store.Get in-process, near cache off",
		"store.Get in-process, near-cache hit",
		"raw go-redis SET (baseline)",
		"sidecar HTTP PUT",
		"store.Put in-process",
	}
	res, err := interleave(rounds, per, []func() error{
		func() error { return raw.Get(ctx, "raw16k").Err() },
		func() error { return httpDo("GET", coldHTTP.URL+"/v1/sessions/s16k", nil) },
		func() error { return httpDo("GET", hotHTTP.URL+"/v1/sessions/s16k", nil) },
		func() error { _, err := cold.Get(ctx, "s16k"); return err },
		func() error { _, err := hot.Get(ctx, "s16k"); return err },
		func() error { return raw.Set(ctx, "raw16k", doc, 24*time.Hour).Err() },
		func() error { return httpDo("PUT", coldHTTP.URL+"/v1/sessions/w16k", doc) },
		func() error { _, err := cold.Put(ctx, "w16k-store", doc, -1, 0); return err },
	})
	if err != nil {
		return err
	}
	fmt.Printf("session ops, %d-byte JSON session, one client, %d x %d interleaved ops each, redis-server on loopback\n", len(doc), rounds, per)
	fmt.Printf("  %-40s %9s %9s %9s %9s\n", "op", "p50 µs", "p99 µs", "p50 x", "p99 x")
	for i, n := range names {
		base := res[0]
		if i >= 5 {
			base = res[5]
		}
		fmt.Printf("  %-40s %s %s %9.2f %9.2f\n", n, us(res[i].pct(0.5)), us(res[i].pct(0.99)),
			float64(res[i].pct(0.5))/float64(base.pct(0.5)), float64(res[i].pct(0.99))/float64(base.pct(0.99)))
	}
	fmt.Printf("  target: sidecar <= 1.3x raw go-redis; near-cache hit p99 <= 20 µs (measured %s µs in-process)\n", strings.TrimSpace(us(res[4].pct(0.99))))
	return benchFrames(ring)
}

// benchFrames reports sealed frame sizes with and without the zstd dictionary.
func benchFrames(ring *keys.Ring) error {
	plain, err := frame.New(ring, frame.Options{Tenant: "bench"})
	if err != nil {
		return err
	}
	dict, err := frame.New(ring, frame.Options{Tenant: "bench", UseDict: true})
	if err != nil {
		return err
	}
	fmt.Printf("\nframe size (zstd + AES-GCM), mean over 200 seeded sessions, with vs without the JSON dictionary\n")
	fmt.Printf("  %-10s %10s %12s %12s %10s %12s %12s\n", "json", "bytes", "no dict", "dict", "dict/no", "seal µs", "seal+dict µs")
	for _, size := range []int{256, 1024, 4096, 16384} {
		var pb, nb, db int
		var tn, td time.Duration
		for s := range 200 {
			doc := chatJSON(uint64(s+10), size)
			b := frame.Binding{Kind: "sess", ID: "x"}
			t0 := time.Now()
			f1, err := plain.Seal(b, doc)
			t1 := time.Now()
			f2, err2 := dict.Seal(b, doc)
			t2 := time.Now()
			if err != nil || err2 != nil {
				return fmt.Errorf("seal: %v %v", err, err2)
			}
			pb, nb, db, tn, td = pb+len(doc), nb+len(f1), db+len(f2), tn+t1.Sub(t0), td+t2.Sub(t1)
		}
		fmt.Printf("  %-10d %10d %12d %12d %10.3f %12.1f %12.1f\n", size, pb/200, nb/200, db/200, float64(db)/float64(nb),
			float64(tn.Nanoseconds())/200/1e3, float64(td.Nanoseconds())/200/1e3)
	}
	return nil
}
