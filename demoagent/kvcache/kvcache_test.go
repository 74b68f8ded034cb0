package kvcache

import (
	"testing"
)

func seq(start, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(start + i)
	}
	return out
}

func TestBlockHashes(t *testing.T) {
	a := BlockHashes(seq(0, 40), 16)
	b := BlockHashes(append(seq(0, 32), seq(100, 16)...), 16)
	if len(a) != 2 || len(b) != 3 {
		t.Fatalf("full blocks: got %d and %d, want 2 and 3", len(a), len(b))
	}
	if a[0] != b[0] || a[1] != b[1] {
		t.Errorf("equal prefixes hash differently: %x %x", a, b)
	}
	c := BlockHashes(append(seq(1, 16), seq(16, 16)...), 16)
	if c[1] == a[1] {
		t.Errorf("block 1 hash ignores the prefix before it")
	}
	if got := BlockHashes(seq(0, 10), 0); got != nil {
		t.Errorf("block size 0 = %v, want nil", got)
	}
}

func mustPool(t *testing.T, blocks, size int, caching bool) *Pool {
	t.Helper()
	p, err := New(blocks, size, caching)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// run allocates, commits prompt and output, and frees: one finished request.
func run(t *testing.T, p *Pool, prompt []uint64, out int) int {
	t.Helper()
	chain := BlockHashes(prompt, p.BlockSize())
	a, ok := p.Allocate(chain, len(prompt), len(prompt)+out)
	if !ok {
		t.Fatalf("allocate %d+%d tokens failed: %+v", len(prompt), out, p.Stats())
	}
	p.Commit(a, chain)
	full := append(append([]uint64(nil), prompt...), seq(1_000_000, out)...)
	p.Commit(a, BlockHashes(full, p.BlockSize()))
	p.Free(a)
	return a.CachedTokens()
}

func TestPrefixHits(t *testing.T) {
	tests := []struct {
		name       string
		caching    bool
		first, sec []uint64
		wantCached int
	}{
		{"same prompt recomputes its last block", true, seq(0, 64), seq(0, 64), 48},
		{"longer prompt shares the whole first prompt", true, seq(0, 64), seq(0, 80), 64},
		{"unaligned prompt shares full blocks only", true, seq(0, 70), seq(0, 90), 64},
		{"different first token shares nothing", true, seq(0, 64), seq(1, 64), 0},
		{"prompt plus output of turn 1 is cached", true, seq(0, 40), append(append(seq(0, 40), seq(1_000_000, 8)...), seq(500, 20)...), 48},
		{"caching off", false, seq(0, 64), seq(0, 64), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPool(t, 100, 16, tt.caching)
			if got := run(t, p, tt.first, 8); got != 0 {
				t.Fatalf("cold cache hit %d tokens", got)
			}
			if got := run(t, p, tt.sec, 8); got != tt.wantCached {
				t.Fatalf("cached tokens = %d, want %d", got, tt.wantCached)
			}
			st := p.Stats()
			if tt.caching && (st.Queries != uint64(len(tt.first)+len(tt.sec)) || st.Hits != uint64(tt.wantCached)) {
				t.Errorf("stats queries=%d hits=%d", st.Queries, st.Hits)
			}
			if st.Usage != 0 {
				t.Errorf("usage after all freed = %v", st.Usage)
			}
		})
	}
}

func TestLRUEviction(t *testing.T) {
	// 8 blocks of 4 tokens. A and B take 3 blocks each (8 prompt + 4 output tokens).
	p := mustPool(t, 8, 4, true)
	a, b, c := seq(0, 8), seq(100, 8), seq(200, 8)
	run(t, p, a, 4)
	run(t, p, b, 4)
	if got := run(t, p, a, 4); got != 4 { // touches A: B is now least recently used
		t.Fatalf("A again cached %d, want 4", got)
	}
	run(t, p, c, 4) // needs 3 blocks with 2 free: evicts 1, the tail of B (least recently used)
	if st := p.Stats(); st.CachedBlocks != 8 {
		t.Fatalf("cached blocks = %d, want 8", st.CachedBlocks)
	}
	if got := run(t, p, b, 4); got != 4 {
		t.Errorf("B's head should outlive its tail: cached %d, want 4", got)
	}
	if got := run(t, p, a, 4); got != 4 {
		t.Errorf("A (recently used) was evicted: cached %d, want 4", got)
	}
}

func TestAllocateCapacity(t *testing.T) {
	p := mustPool(t, 4, 4, true)
	if p.CanEverFit(17) || !p.CanEverFit(16) {
		t.Fatalf("CanEverFit wrong at the 16-token capacity")
	}
	held, ok := p.Allocate(BlockHashes(seq(0, 8), 4), 8, 12)
	if !ok || held.Blocks() != 3 {
		t.Fatalf("first allocation ok=%v blocks=%d", ok, held.Blocks())
	}
	if got := p.Stats().Usage; got != 0.75 {
		t.Errorf("usage = %v, want 0.75", got)
	}
	if _, ok := p.Allocate(BlockHashes(seq(50, 8), 4), 8, 8); ok {
		t.Fatal("allocated 2 blocks with 1 free")
	}
	if st := p.Stats(); st.Queries != 8 {
		t.Errorf("a failed allocation counted as a query: %+v", st)
	}
	p.Commit(held, BlockHashes(seq(0, 8), 4))
	p.Free(held)
	// The 2 cached blocks are evictable now; sharing the first one leaves room for the rest.
	b, ok := p.Allocate(BlockHashes(append(seq(0, 4), seq(60, 12)...), 4), 16, 16)
	if !ok || b.CachedTokens() != 4 {
		t.Fatalf("allocation over evictable blocks ok=%v cached=%v", ok, b)
	}
	if got := p.Stats(); got.Usage != 1 || got.CachedBlocks != 1 {
		t.Errorf("after eviction: %+v, want usage 1 and 1 cached block", got)
	}
}

func TestCommitSharesConcurrentDuplicate(t *testing.T) {
	p := mustPool(t, 10, 4, true)
	prompt := seq(0, 8)
	chain := BlockHashes(prompt, 4)
	a, _ := p.Allocate(chain, 8, 8)
	b, _ := p.Allocate(chain, 8, 8) // admitted before a's prefill finished: no hit
	if b.CachedTokens() != 0 {
		t.Fatalf("hit on blocks not yet computed")
	}
	p.Commit(a, chain)
	p.Commit(b, chain)
	if st := p.Stats(); st.CachedBlocks != 2 || st.Usage != 0.2 {
		t.Fatalf("duplicate blocks not shared: %+v", st)
	}
	p.Free(a)
	p.Free(b)
	if st := p.Stats(); st.Usage != 0 || st.CachedBlocks != 2 {
		t.Fatalf("after free: %+v", st)
	}
}

func TestNewRejectsBadSizes(t *testing.T) {
	for _, tt := range []struct{ blocks, size int }{{0, 16}, {10, 0}} {
		if _, err := New(tt.blocks, tt.size, true); err == nil {
			t.Errorf("New(%d, %d) accepted", tt.blocks, tt.size)
		}
	}
}
