package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// state is the demo agent's synthetic in-memory state (--state-bytes): one buffer, every byte
// written (so every page is resident, as a model's loaded weights or KV cache would be), filled
// from a seed by splitmix64 (incompressible, like weights). It stands in for what a real agent
// builds at start and loses when its process dies, for the session resume benchmark.
type state struct {
	mu    sync.RWMutex
	buf   []byte
	seed  uint64
	ready chan struct{}
}

// newState allocates n bytes; fill must run before the state is used.
func newState(n int64) *state {
	return &state{buf: make([]byte, n), ready: make(chan struct{})}
}

// fill writes the whole buffer from seed. The first fill marks the state ready.
func (s *state) fill(seed uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fillSplitMix(s.buf, seed)
	s.seed = seed
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
}

// fillSplitMix writes splitmix64's sequence from seed into b, little endian.
func fillSplitMix(b []byte, seed uint64) {
	x := seed
	next := func() uint64 {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		return z ^ (z >> 31)
	}
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], next())
	}
	if i < len(b) {
		var tail [8]byte
		binary.LittleEndian.PutUint64(tail[:], next())
		copy(b[i:], tail[:])
	}
}

// stateInfo is the answer of /state.
type stateInfo struct {
	Bytes  int    `json:"bytes"`
	Seed   uint64 `json:"seed"`
	SHA256 string `json:"sha256"`
}

// info hashes the buffer as it is in memory now.
func (s *state) info() stateInfo {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sum := sha256.Sum256(s.buf)
	return stateInfo{Bytes: len(s.buf), Seed: s.seed, SHA256: hex.EncodeToString(sum[:])}
}

// handler serves GET /state (the SHA-256 of the buffer, computed now) and POST /state?seed=N
// (refill from N, then the same answer), and holds every other request except /healthz,
// /readyz and /metrics until the first fill is done: the agent serves nothing before its state
// is built, as a model server serves nothing before its weights are loaded.
func (s *state) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/state":
			s.serveState(w, r)
			return
		case r.URL.Path == "/healthz", r.URL.Path == "/readyz", strings.HasPrefix(r.URL.Path, "/metrics"):
		default:
			select {
			case <-s.ready:
			case <-r.Context().Done():
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (s *state) serveState(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost:
		seed, err := strconv.ParseUint(r.URL.Query().Get("seed"), 10, 64)
		if err != nil {
			http.Error(w, fmt.Sprintf("seed: %v", err), http.StatusBadRequest)
			return
		}
		s.fill(seed)
	default:
		http.Error(w, "GET or POST", http.StatusMethodNotAllowed)
		return
	}
	select {
	case <-s.ready:
	case <-r.Context().Done():
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s.info())
}
