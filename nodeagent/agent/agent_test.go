package agent

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/internal/egress"
	"github.com/neuronetes/neuronetes/nodeagent/cache"
	"github.com/neuronetes/neuronetes/nodeagent/warm"
)

// testSources admits file sources below the temporary directory and loopback HTTP servers.
var testSources = cache.SourceOptions{FileRoots: []string{os.TempDir()}, Egress: egress.AllowLoopback()}

func sourceFile(t *testing.T, dir, name string, size int) (uri, digest string) {
	t.Helper()
	b := make([]byte, size)
	rand.Read(b)
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return "file://" + p, "sha256:" + hex.EncodeToString(s[:])
}

func newAgent(t *testing.T, memBudget int64) (*Agent, *Metrics) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	st, err := cache.Open(filepath.Join(t.TempDir(), "cache"), cache.Options{Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	return New(context.Background(), Config{Store: st, MemoryBudget: memBudget, Metrics: m, Warm: warm.Options{Parallel: 2}, Sources: testSources}), m
}

func TestEnsureWarm(t *testing.T) {
	a, m := newAgent(t, 0)
	uri, digest := sourceFile(t, t.TempDir(), "w", 3<<20)
	st, err := a.EnsureWarm(context.Background(), Request{Digest: digest, URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != PhaseReady || !st.Warm || st.ResidentBytes != 3<<20 || st.BytesCached != 3<<20 {
		t.Fatalf("state after EnsureWarm = %+v, want Ready, warm, 3 MiB resident", st)
	}
	if got := testutil.ToFloat64(m.BytesFetched); got != 3<<20 {
		t.Fatalf("bytes fetched %v, want %d", got, 3<<20)
	}
	// Second call: served from the cache, no source needed.
	if _, err := a.EnsureWarm(context.Background(), Request{Digest: digest}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.CacheHits); got != 1 {
		t.Fatalf("cache hits %v, want 1", got)
	}
	if got := testutil.CollectAndCount(m.PrewarmDuration); got != 1 {
		t.Fatalf("prewarm histogram series %d, want 1", got)
	}
}

func TestEnsureWarmFailures(t *testing.T) {
	dir := t.TempDir()
	uri, _ := sourceFile(t, dir, "w", 1000)
	_, other := sourceFile(t, dir, "o", 10)
	tests := []struct {
		name    string
		req     Request
		wantMsg string
	}{
		{"digest mismatch", Request{Digest: other, URI: uri}, "digest mismatch"},
		{"no source", Request{Digest: other}, "no source uri"},
		{"bad scheme", Request{Digest: other, URI: "ftp://x/y"}, "unsupported scheme"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, _ := newAgent(t, 0)
			st, err := a.EnsureWarm(context.Background(), tt.req)
			if err == nil || !strings.Contains(err.Error(), tt.wantMsg) || st.Phase != PhaseFailed {
				t.Fatalf("EnsureWarm = %+v, %v; want Failed with %q", st, err, tt.wantMsg)
			}
		})
	}
}

func TestMemoryBudgetSkipsUnpinnedWarmup(t *testing.T) {
	const size = 2 << 20
	a, _ := newAgent(t, size+size/2)
	dir := t.TempDir()
	uri1, d1 := sourceFile(t, dir, "a", size)
	uri2, d2 := sourceFile(t, dir, "b", size)
	if _, err := a.EnsureWarm(context.Background(), Request{Digest: d1, URI: uri1}); err != nil {
		t.Fatal(err)
	}
	st, err := a.EnsureWarm(context.Background(), Request{Digest: d2, URI: uri2})
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != PhaseReady || !strings.Contains(st.Message, "memory budget") {
		t.Fatalf("second model state %+v, want Ready and not warmed for the memory budget", st)
	}
	// Pinned by a pod, it is warmed, and the first (unpinned, older) one is dropped by Refresh.
	h2, _ := cache.ParseDigest(d2)
	a.Store().Pin(h2, "ns/pod")
	if st, err = a.EnsureWarm(context.Background(), Request{Digest: d2}); err != nil || !st.Warm {
		t.Fatalf("pinned model %+v, %v; want warm", st, err)
	}
	var warmCount int
	for _, s := range a.Refresh() {
		if s.Warm {
			warmCount++
			if s.Hex != h2 {
				t.Fatalf("unpinned %s still warm over the memory budget", s.Hex[:8])
			}
		}
	}
	if warmCount != 1 {
		t.Fatalf("%d warm entries after Refresh, want 1 (the pinned one)", warmCount)
	}
}

func TestNodeStatus(t *testing.T) {
	h := strings.Repeat("a", 64)
	m := &v1alpha1.Model{Spec: v1alpha1.ModelSpec{Digest: "sha256:" + h}}
	tests := []struct {
		name      string
		model     *v1alpha1.Model
		state     *State
		wantPhase v1alpha1.ModelCachePhase
		wantMsg   string
	}{
		{"unknown is pending", m, nil, v1alpha1.ModelCachePending, ""},
		{"bad digest", &v1alpha1.Model{Spec: v1alpha1.ModelSpec{Digest: "sha1:x"}}, nil, v1alpha1.ModelCacheFailed, "spec.digest"},
		{"downloading", m, &State{Hex: h, Phase: PhaseDownloading, BytesCached: 50, SizeBytes: 200, BytesPerSecond: 1 << 20, ETA: 3e9}, v1alpha1.ModelCacheDownloading, "downloading 50 of 200 bytes (25%) at 1.0 MiB/s, ETA 3s"},
		{"warm", m, &State{Hex: h, Phase: PhaseReady, BytesCached: 200, SizeBytes: 200, ResidentBytes: 200, Warm: true}, v1alpha1.ModelCacheReady, "warm: resident 100%"},
		{"failed", m, &State{Hex: h, Phase: PhaseFailed, Message: "boom"}, v1alpha1.ModelCacheFailed, "boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			by := map[string]State{}
			if tt.state != nil {
				by[h] = *tt.state
			}
			got := NodeStatus("n1", tt.model, by)
			if got.NodeName != "n1" || got.Phase != tt.wantPhase || !strings.Contains(got.Message, tt.wantMsg) {
				t.Fatalf("NodeStatus = %+v, want phase %s, message containing %q", got, tt.wantPhase, tt.wantMsg)
			}
		})
	}
}
