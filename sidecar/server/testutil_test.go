package server

import (
	"bytes"
	"io"
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

type fixture struct {
	srv   *httptest.Server
	store *store.Store
	rdb   *redis.Client
}

func newFixture(t testing.TB, addr, tenant string, so store.Options) *fixture {
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
	hs := httptest.NewServer(New(st, vec, nil, nil).Handler())
	t.Cleanup(hs.Close)
	return &fixture{srv: hs, store: st, rdb: rdb}
}

// do sends a request and returns status, headers and body.
func (f *fixture) do(t testing.TB, method, path string, hdr map[string]string, body string) (int, http.Header, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = bytes.NewBufferString(body)
	}
	req, err := http.NewRequest(method, f.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}
