package server

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/sidecar/redistest"
	"github.com/neuronetes/neuronetes/sidecar/store"
)

// BenchmarkHTTPSessions measures the HTTP API's session GET and PUT of a
// 16 KiB JSON session against a real redis-server, client and server in
// this process (profile the server path with -cpuprofile).
func BenchmarkHTTPSessions(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	for _, engine := range engines {
		b.Run(engine, func(b *testing.B) {
			benchHTTPSessions(b, newFixtureOn(b, engine, srv.Addr, "bench", store.Options{RefreshOnRead: true}))
		})
	}
}

func benchHTTPSessions(b *testing.B, f *fixture) {
	var doc strings.Builder
	doc.WriteString(`{"turns":[`)
	for i := 0; doc.Len() < 16<<10-64; i++ {
		fmt.Fprintf(&doc, `{"role":"user","content":"turn %d about the cluster scale and cache %d"},`, i, i*7919)
	}
	doc.WriteString(`{}]}`)
	body := []byte(doc.String())
	c := f.client
	do := func(b *testing.B, method string, body []byte) {
		req, _ := http.NewRequest(method, f.url+"/v1/sessions/s", bytes.NewReader(body))
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %d", method, resp.StatusCode)
		}
	}
	b.Run("PUT", func(b *testing.B) {
		for b.Loop() {
			do(b, http.MethodPut, body)
		}
	})
	b.Run("GET", func(b *testing.B) {
		for b.Loop() {
			do(b, http.MethodGet, nil)
		}
	})
}
