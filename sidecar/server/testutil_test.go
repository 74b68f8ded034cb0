package server

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/sidecar/frame"
	"github.com/neuronetes/neuronetes/sidecar/keys"
	"github.com/neuronetes/neuronetes/sidecar/store"
	"github.com/neuronetes/neuronetes/sidecar/vector"
)

// engines are the HTTP servers the API tests run against.
var engines = []string{"net", "fasthttp"}

type fixture struct {
	url    string // the HTTP API's base URL
	client *http.Client
	store  *store.Store
	rdb    *redis.Client
}

func newFixture(t testing.TB, addr, tenant string, so store.Options) *fixture {
	t.Helper()
	return newFixtureOn(t, "net", addr, tenant, so)
}

// newFixtureOn serves the API with engine ("net": Handler on net/http,
// "fasthttp": FastServer).
func newFixtureOn(t testing.TB, engine, addr, tenant string, so store.Options) *fixture {
	t.Helper()
	ring, err := keys.NewRing("k1", map[string][]byte{"k1": bytes.Repeat([]byte{3}, keys.KeySize)})
	if err != nil {
		t.Fatal(err)
	}
	codec, err := frame.New(ring, frame.Options{Tenant: tenant})
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1,
		ReadTimeout: time.Second, WriteTimeout: time.Second, PoolSize: 64, PoolTimeout: time.Second})
	t.Cleanup(func() { rdb.Close() })
	st, err := store.New(rdb, codec, so)
	if err != nil {
		t.Fatal(err)
	}
	vec := &Vectors{Index: vector.New(vector.Options{}), Embeddings: vector.NewEmbeddingCache(1<<20, st.Blobs("emb"), time.Hour)}
	api := New(st, vec, nil, nil)
	if engine == "net" {
		hs := httptest.NewServer(api.Handler())
		t.Cleanup(hs.Close)
		return &fixture{url: hs.URL, client: hs.Client(), store: st, rdb: rdb}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fs := api.FastServer(context.Background(), 0)
	go func() { _ = fs.Serve(l) }()
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		_ = fs.Shutdown()
	})
	return &fixture{url: "http://" + l.Addr().String(), client: &http.Client{Transport: tr}, store: st, rdb: rdb}
}

// do sends a request and returns status, headers and body.
func (f *fixture) do(t testing.TB, method, path string, hdr map[string]string, body string) (int, http.Header, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = bytes.NewBufferString(body)
	}
	req, err := http.NewRequest(method, f.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}
