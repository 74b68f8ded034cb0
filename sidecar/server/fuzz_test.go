package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/sidecar/store"
)

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }

// FuzzDecodeSession feeds arbitrary ids, headers, queries and bodies to the
// session request decoder. Invariants: it never panics; it only accepts
// valid ids and JSON-object bodies within the limit; every error maps to 400
// or 413.
func FuzzDecodeSession(f *testing.F) {
	for _, s := range []struct{ method, id, ifMatch, ttl, hdrTTL, body string }{
		{"PUT", "conv-1", "", "", "", `{"turns":[]}`},
		{"PUT", "c", `"12"`, "30m", "", `{}`},
		{"GET", "a:b", "", "", "", ""},
		{"POST", "c", "W/\"3\"", "", "90", `{"role":"user","content":"x"}`},
		{"PUT", "c", "-1", "0", "1e9h", `[1]`},
		{"PUT", "..", "", "", "", `{"a":` + strings.Repeat("[", 100)},
	} {
		f.Add(s.method, s.id, s.ifMatch, s.ttl, s.hdrTTL, []byte(s.body))
	}
	const limit = 256
	f.Fuzz(func(t *testing.T, method, id, ifMatch, ttl, hdrTTL string, body []byte) {
		if method != "GET" && method != "PUT" && method != "POST" && method != "DELETE" {
			method = "PUT"
		}
		r := httptest.NewRequest(method, "/", bytes.NewReader(body))
		r.SetPathValue("id", id)
		r.Header.Set("If-Match", ifMatch)
		r.Header.Set(TTLHeader, hdrTTL)
		q := r.URL.Query()
		q.Set("ttl", ttl)
		r.URL.RawQuery = q.Encode()
		req, err := decodeSession(r, limit)
		if err != nil {
			if c := httpStatus(err); c != http.StatusBadRequest && c != http.StatusRequestEntityTooLarge {
				t.Fatalf("decode error %v maps to %d", err, c)
			}
			// 413 only for bodies over the limit. An over-limit body may
			// instead get a 400 for a bad id, If-Match or ttl: those are
			// checked first, before the body is read.
			if errors.Is(err, errTooLarge) && len(body) <= limit {
				t.Fatalf("413 for a body of %d bytes (limit %d): %v", len(body), limit, err)
			}
			return
		}
		if !store.ValidID(req.id) || req.ttl < 0 {
			t.Fatalf("accepted id %q ttl %v", req.id, req.ttl)
		}
		if (method == "PUT" || method == "POST") && len(req.body) > limit {
			t.Fatalf("accepted body of %d bytes", len(req.body))
		}
		// The store's cheap object check must agree with a full decode.
		var m map[string]json.RawMessage
		if want := json.Unmarshal(body, &m) == nil && m != nil; store.IsObject(body) != want {
			t.Fatalf("IsObject(%q) = %v, json.Unmarshal says %v", body, !want, want)
		}
	})
}

// FuzzDecodeVectorRequests checks the vector and embedding decoders.
func FuzzDecodeVectorRequests(f *testing.F) {
	for _, s := range []string{`{"id":"a","vector":[1,2,3]}`, `{"vector":[1],"k":5,"metric":"l2"}`,
		`{"model":"m","text":"t","vector":[0.1]}`, `{"vector":[1e39],"k":1}`, `{"k":-1}`, `null`, `{"vector":"x"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		mk := func() *http.Request { return httptest.NewRequest("POST", "/", bytes.NewReader(body)) }
		if req, err := decodeInsert(mk()); err == nil && (!store.ValidID(req.ID) || len(req.Vector) == 0) {
			t.Fatalf("insert accepted %+v", req)
		}
		if req, _, err := decodeSearch(mk()); err == nil && (req.K <= 0 || req.K > 1000 || len(req.Vector) == 0) {
			t.Fatalf("search accepted %+v", req)
		}
		if req, err := decodeEmbedding(mk(), true); err == nil && (req.Model == "" || len(req.Vector) == 0) {
			t.Fatalf("embedding accepted %+v", req)
		}
	})
}
