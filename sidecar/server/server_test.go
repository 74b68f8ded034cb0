package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/sidecar/redistest"
	"github.com/neuronetes/neuronetes/sidecar/store"
)

func TestSessionAPI(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			testSessionAPI(t, newFixtureOn(t, engine, rs.Addr, "team-"+engine, store.Options{MaxSize: 4096}))
		})
	}
}

func testSessionAPI(t *testing.T, f *fixture) {
	code, h, _ := f.do(t, "PUT", "/v1/sessions/c1", nil, `{"turns":[{"role":"user","content":"hi"}]}`)
	if code != 200 || h.Get("ETag") == "" {
		t.Fatalf("PUT = %d, ETag %q", code, h.Get("ETag"))
	}
	v1 := h.Get("ETag")
	for _, tc := range []struct {
		name     string
		method   string
		path     string
		hdr      map[string]string
		body     string
		want     int
		contains string
	}{
		{"get", "GET", "/v1/sessions/c1", nil, "", 200, `"content":"hi"`},
		{"stale if-match", "PUT", "/v1/sessions/c1", map[string]string{"If-Match": "999999"}, `{}`, 412, "current_version"},
		{"quoted if-match create-only conflict", "PUT", "/v1/sessions/c1", map[string]string{"If-Match": `"0"`}, `{}`, 412, ""},
		{"bad if-match", "PUT", "/v1/sessions/c1", map[string]string{"If-Match": "abc"}, `{}`, 400, "If-Match"},
		{"oversize", "PUT", "/v1/sessions/c2", nil, `{"a":"` + strings.Repeat("x", 5000) + `"}`, 413, ""},
		{"bad json", "PUT", "/v1/sessions/c2", nil, `{"a":`, 400, ""},
		{"json not object", "PUT", "/v1/sessions/c2", nil, `[1,2]`, 400, ""},
		{"bad id", "GET", "/v1/sessions/a:b", nil, "", 400, "conversation id"},
		{"tenant escape id", "GET", "/v1/sessions/%7Bteam-b%7D", nil, "", 400, ""},
		{"escaped slash in id", "GET", "/v1/sessions/a%2Fb", nil, "", 400, "conversation id"},
		{"unknown method", "PATCH", "/v1/sessions/c1", nil, `{}`, 405, ""},
		{"unknown route", "GET", "/v1/sessions/c1/other", nil, "", 404, ""},
		{"bad ttl", "PUT", "/v1/sessions/c2?ttl=-5", nil, `{}`, 400, "ttl"},
		{"bad ttl header", "PUT", "/v1/sessions/c2", map[string]string{TTLHeader: "soon"}, `{}`, 400, "ttl"},
		{"missing", "GET", "/v1/sessions/none", nil, "", 404, ""},
		{"append bad turn", "POST", "/v1/sessions/c1/turns", nil, `"x"`, 400, ""},
		{"cas ok", "PUT", "/v1/sessions/c1", map[string]string{"If-Match": v1}, `{"turns":[]}`, 200, "version"},
		{"append", "POST", "/v1/sessions/c1/turns?ttl=1h", nil, `{"role":"assistant","content":"yo"}`, 200, "version"},
		{"get after append", "GET", "/v1/sessions/c1", nil, "", 200, `"turns":[{"role":"assistant","content":"yo"}]`},
		{"delete", "DELETE", "/v1/sessions/c1", nil, "", 204, ""},
		{"delete again", "DELETE", "/v1/sessions/c1", nil, "", 404, ""},
		{"ttl header", "PUT", "/v1/sessions/short", map[string]string{TTLHeader: "1"}, `{}`, 200, ""},
		{"healthz", "GET", "/healthz", nil, "", 200, "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := f.do(t, tc.method, tc.path, tc.hdr, tc.body)
			if code != tc.want || !strings.Contains(body, tc.contains) {
				t.Fatalf("%s %s = %d %s; want %d containing %q", tc.method, tc.path, code, body, tc.want, tc.contains)
			}
		})
	}
	// Per-entry TTL from the header: the entry expires on its own.
	time.Sleep(1200 * time.Millisecond)
	if code, _, _ := f.do(t, "GET", "/v1/sessions/short", nil, ""); code != 404 {
		t.Fatalf("after ttl: %d, want 404", code)
	}
	// A flipped ciphertext bit is a 500, never an empty 200.
	f.do(t, "PUT", "/v1/sessions/tamper", nil, `{"x":1}`)
	d, _ := f.rdb.HGet(t.Context(), f.store.Key("tamper"), "d").Bytes()
	d[len(d)-1] ^= 1
	f.rdb.HSet(t.Context(), f.store.Key("tamper"), "d", d)
	if code, _, body := f.do(t, "GET", "/v1/sessions/tamper", nil, ""); code != 500 || !strings.Contains(body, "authentication") {
		t.Fatalf("tampered GET = %d %s", code, body)
	}
}

func TestConcurrentHTTPAppends(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			testConcurrentHTTPAppends(t, newFixtureOn(t, engine, rs.Addr, "team-"+engine, store.Options{}))
		})
	}
}

func testConcurrentHTTPAppends(t *testing.T, f *fixture) {
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 10 {
				if code, _, body := f.do(t, "POST", "/v1/sessions/race/turns", nil, fmt.Sprintf(`{"role":"user","content":"%d-%d"}`, w, i)); code != 200 {
					t.Errorf("append = %d %s", code, body)
				}
			}
		})
	}
	wg.Wait()
	_, _, body := f.do(t, "GET", "/v1/sessions/race", nil, "")
	var doc struct{ Turns []json.RawMessage }
	if err := json.Unmarshal([]byte(body), &doc); err != nil || len(doc.Turns) != 80 {
		t.Fatalf("turns = %d (%v), want 80", len(doc.Turns), err)
	}
}

func TestUnavailable503(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			rs := redistest.Start(t, redistest.Options{})
			testUnavailable503(t, rs, newFixtureOn(t, engine, rs.Addr, "team-a", store.Options{}))
		})
	}
}

func testUnavailable503(t *testing.T, rs *redistest.Server, f *fixture) {
	rs.Kill()
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/v1/sessions/x", ""}, {"PUT", "/v1/sessions/x", `{}`}, {"POST", "/v1/sessions/x/turns", `{}`}, {"DELETE", "/v1/sessions/x", ""},
	} {
		code, h, _ := f.do(t, r.method, r.path, nil, r.body)
		if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
			t.Fatalf("%s with redis down = %d, Retry-After %q", r.method, code, h.Get("Retry-After"))
		}
	}
	if err := rs.Start(); err != nil {
		t.Fatal(err)
	}
	if code, _, body := f.do(t, "PUT", "/v1/sessions/x", nil, `{}`); code != 200 {
		t.Fatalf("after restart: %d %s", code, body)
	}
}

func TestVectorAndEmbeddingAPI(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) { testVectorAndEmbeddingAPI(t, engine) })
	}
}

func testVectorAndEmbeddingAPI(t *testing.T, engine string) {
	rs := redistest.Start(t, redistest.Options{})
	f := newFixtureOn(t, engine, rs.Addr, "team-a", store.Options{})
	g := newFixtureOn(t, engine, rs.Addr, "team-a", store.Options{}) // a second sidecar of the tenant
	other := newFixtureOn(t, engine, rs.Addr, "team-b", store.Options{})
	for _, tc := range []struct {
		name         string
		fx           *fixture
		method, path string
		body         string
		want         int
		contains     string
	}{
		{"insert a", f, "POST", "/v1/vectors", `{"id":"a","vector":[1,0,0],"metadata":{"text":"alpha"}}`, 200, "evicted"},
		{"insert b", f, "POST", "/v1/vectors", `{"id":"b","vector":[0,1,0]}`, 200, ""},
		{"insert bad dim", f, "POST", "/v1/vectors", `{"id":"c","vector":[0,1]}`, 400, "dimension"},
		{"insert bad id", f, "POST", "/v1/vectors", `{"id":"a b","vector":[0,1,0]}`, 400, ""},
		{"search cosine", f, "POST", "/v1/vectors/search", `{"vector":[0.9,0.1,0],"k":1}`, 200, `"id":"a","score":0.99`},
		{"search metadata", f, "POST", "/v1/vectors/search", `{"vector":[1,0,0],"k":1,"metric":"l2"}`, 200, `"metadata":{"text":"alpha"}`},
		{"search bad metric", f, "POST", "/v1/vectors/search", `{"vector":[1,0,0],"k":1,"metric":"dot"}`, 400, ""},
		{"search bad k", f, "POST", "/v1/vectors/search", `{"vector":[1,0,0],"k":0}`, 400, ""},
		{"delete", f, "DELETE", "/v1/vectors/a", "", 204, ""},
		{"delete missing", f, "DELETE", "/v1/vectors/a", "", 404, ""},
		{"emb miss", f, "POST", "/v1/embeddings/lookup", `{"model":"m","text":"hello"}`, 404, ""},
		{"emb put", f, "PUT", "/v1/embeddings", `{"model":"m","text":"hello","vector":[0.5,0.25]}`, 204, ""},
		{"emb local hit", f, "POST", "/v1/embeddings/lookup", `{"model":"m","text":"hello"}`, 200, `"source":"local"`},
		{"emb remote hit on other sidecar", g, "POST", "/v1/embeddings/lookup", `{"model":"m","text":"hello"}`, 200, `{"source":"remote","vector":[0.5,0.25]}`},
		{"emb other model misses", g, "POST", "/v1/embeddings/lookup", `{"model":"m2","text":"hello"}`, 404, ""},
		{"emb other tenant misses", other, "POST", "/v1/embeddings/lookup", `{"model":"m","text":"hello"}`, 404, ""},
		{"emb bad", f, "PUT", "/v1/embeddings", `{"model":"m","text":"x"}`, 400, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := tc.fx.do(t, tc.method, tc.path, nil, tc.body)
			if code != tc.want || !strings.Contains(body, tc.contains) {
				t.Fatalf("%s %s = %d %s; want %d containing %q", tc.method, tc.path, code, body, tc.want, tc.contains)
			}
		})
	}
}
