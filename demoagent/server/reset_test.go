package server

import (
	"io"
	"net/http"
	"testing"
)

// TestResetPrefixCache checks that POST /reset_prefix_cache empties the cache: a repeated prompt
// that hit the cache before the reset misses after it.
func TestResetPrefixCache(t *testing.T) {
	_, ts := newTestServer(t, fastEngine(), testConfig(), nil)
	body := `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"` + words(64) + `"}]}`
	hits := func() float64 {
		v, _ := metric(scrape(t, ts.URL), "vllm:prefix_cache_hits_total")
		return v
	}
	complete := func() {
		r := post(t, ts.URL+"/v1/chat/completions", body, nil)
		_, _ = io.Copy(io.Discard, r.Body)
	}
	complete()
	complete()
	before := hits()
	if before == 0 {
		t.Fatal("the repeated prompt did not hit the cache")
	}
	if r := post(t, ts.URL+"/reset_prefix_cache", "", nil); r.StatusCode != http.StatusOK {
		t.Fatalf("reset status %d", r.StatusCode)
	}
	complete()
	if after := hits(); after != before {
		t.Fatalf("hits %v after the reset, want %v (the cache was not emptied)", after, before)
	}
}

func words(n int) string {
	b := make([]byte, 0, n*3)
	for i := 0; i < n; i++ {
		b = append(b, 'w', byte('a'+i%26), ' ')
	}
	return string(b)
}
