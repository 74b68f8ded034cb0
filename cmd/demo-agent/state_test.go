package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestFillSplitMix(t *testing.T) {
	a, b, c := make([]byte, 1<<16+5), make([]byte, 1<<16+5), make([]byte, 1<<16+5)
	fillSplitMix(a, 1)
	fillSplitMix(b, 1)
	fillSplitMix(c, 2)
	if string(a) != string(b) {
		t.Fatal("same seed filled differently")
	}
	if string(a) == string(c) {
		t.Fatal("seeds 1 and 2 filled the same")
	}
	// Every page written: no all-zero 4 KiB page, and the tail is filled too.
	for off := 0; off+4096 <= len(a); off += 4096 {
		zero := true
		for _, x := range a[off : off+4096] {
			if x != 0 {
				zero = false
				break
			}
		}
		if zero {
			t.Fatalf("page at %d left zero", off)
		}
	}
	if a[len(a)-1] == 0 && a[len(a)-2] == 0 && a[len(a)-3] == 0 {
		t.Errorf("tail bytes not filled: %v", a[len(a)-5:])
	}
}

func TestStateHandler(t *testing.T) {
	st := newState(1 << 20)
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("served")) })
	srv := httptest.NewServer(st.handler(next))
	defer srv.Close()

	// Before the first fill a request is held (until its deadline), /healthz is not.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("request served before the state was filled: %d", resp.StatusCode)
	}
	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz before the fill: %v %v", resp, err)
	}
	resp.Body.Close()

	st.fill(3)
	want := make([]byte, 1<<20)
	fillSplitMix(want, 3)
	sum := sha256.Sum256(want)
	get := func(method, path string, code int) stateInfo {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != code {
			t.Fatalf("%s %s: %d, want %d", method, path, resp.StatusCode, code)
		}
		var si stateInfo
		if code == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(&si); err != nil {
				t.Fatal(err)
			}
		}
		return si
	}
	tests := []struct {
		name, method, path string
		code               int
		seed               uint64
	}{
		{"GET hashes the state filled at start", http.MethodGet, "/state", 200, 3},
		{"POST refills from the seed", http.MethodPost, "/state?seed=9", 200, 9},
		{"POST without a seed is refused", http.MethodPost, "/state", 400, 9},
		{"PUT is refused", http.MethodPut, "/state", 405, 9},
		{"GET after the refused ones", http.MethodGet, "/state", 200, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			si := get(tt.method, tt.path, tt.code)
			if tt.code != 200 {
				return
			}
			fillSplitMix(want, tt.seed)
			sum = sha256.Sum256(want)
			if si.Bytes != 1<<20 || si.Seed != tt.seed || si.SHA256 != hex.EncodeToString(sum[:]) {
				t.Errorf("state %+v, want seed %d sum %x", si, tt.seed, sum)
			}
		})
	}
	resp, err = http.Post(srv.URL+"/v1/chat/completions", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("request after the fill: %d", resp.StatusCode)
	}
}

func BenchmarkFillSplitMix(b *testing.B) {
	buf := make([]byte, 64<<20)
	b.SetBytes(int64(len(buf)))
	for i := 0; b.Loop(); i++ {
		fillSplitMix(buf, uint64(i))
	}
}
