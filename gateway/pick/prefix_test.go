package pick

import (
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/gateway/route"
)

var pool = route.PoolRef{Namespace: "ns", Name: "p"}

func text(blocks ...string) string {
	var b strings.Builder
	for _, s := range blocks {
		b.WriteString(strings.Repeat(s, 8)) // 8 bytes per block with BlockBytes 8
	}
	return b.String()
}

func TestPrefixBlocksChain(t *testing.T) {
	x := NewPrefixIndex(8, 100)
	a := x.Blocks(pool, text("A", "B", "C")+"tail")
	b := x.Blocks(pool, text("A", "B", "D"))
	if len(a) != 3 {
		t.Fatalf("blocks = %d, want 3 (the partial tail is not indexed)", len(a))
	}
	if a[0] != b[0] || a[1] != b[1] || a[2] == b[2] {
		t.Fatal("equal prefixes must hash equal and a different block must differ")
	}
	// The same block after a different prefix is a different prefix.
	c := x.Blocks(pool, text("X", "B"))
	if c[1] == a[1] {
		t.Fatal("block hash does not chain its prefix")
	}
	if other := x.Blocks(route.PoolRef{Name: "q"}, text("A")); other[0] == a[0] {
		t.Fatal("pools share index entries")
	}
}

// The whole conversation is indexed: a later turn that extends the prompt matches the pod that
// served the earlier turn for the full earlier prompt, not only its first message.
func TestPrefixMatchLongest(t *testing.T) {
	x := NewPrefixIndex(8, 100)
	turn1 := text("S", "U", "A")
	turn2 := turn1 + text("U", "A")
	x.Record(x.Blocks(pool, text("S", "Z")), "pod-b") // shares only the system block
	x.Record(x.Blocks(pool, turn1), "pod-a")
	m := x.Match(x.Blocks(pool, turn2))
	if m["pod-a"] != 3 || m["pod-b"] != 1 {
		t.Fatalf("match = %v, want pod-a:3 pod-b:1", m)
	}
	if m := x.Match(x.Blocks(pool, text("Q"))); len(m) != 0 {
		t.Fatalf("unrelated prompt matched %v", m)
	}
}

func TestPrefixLRUBound(t *testing.T) {
	x := NewPrefixIndex(8, 4)
	old := x.Blocks(pool, text("1", "2", "3"))
	x.Record(old, "pod-a")
	x.Record(x.Blocks(pool, text("7", "8", "9")), "pod-b")
	if x.Len() != 4 {
		t.Fatalf("len = %d, want the bound 4", x.Len())
	}
	if m := x.Match(old); m["pod-a"] != 0 {
		t.Fatalf("evicted prefix still matches: %v", m)
	}
}

func TestPrefixPodsPerBlock(t *testing.T) {
	x := NewPrefixIndex(8, 100)
	b := x.Blocks(pool, text("S"))
	for _, p := range []string{"p1", "p2", "p3", "p4", "p5", "p2"} {
		x.Record(b, p)
	}
	m := x.Match(b)
	if len(m) != PodsPerBlock || m["p1"] != 0 || m["p2"] != 1 || m["p5"] != 1 {
		t.Fatalf("match = %v: want the %d most recent pods", m, PodsPerBlock)
	}
}
