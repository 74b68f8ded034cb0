package store

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

func benchDoc(size int) []byte {
	var b strings.Builder
	b.WriteString(`{"turns":[`)
	for i := 0; b.Len() < size-64; i++ {
		fmt.Fprintf(&b, `{"role":"user","content":"turn %d about the cluster scale and cache %d"},`, i, i*7919)
	}
	b.WriteString(`{}]}`)
	return []byte(b.String())
}

// BenchmarkStore measures in-process store operations on a 16 KiB session
// against a real redis-server (go test -bench Store ./sidecar/store).
func BenchmarkStore(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	ctx := context.Background()
	s := newStore(b, srv.Addr, "bench", ring(b, "k", 1, "k"), Options{RefreshOnRead: true})
	doc := benchDoc(16 << 10)
	if _, err := s.Put(ctx, "s", doc, -1, 0); err != nil {
		b.Fatal(err)
	}
	if err := s.rdb.Set(ctx, "raw", doc, 0).Err(); err != nil {
		b.Fatal(err)
	}
	b.Run("Put", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Put(ctx, "s", doc, -1, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Get", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Get(ctx, "s"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("RawGet", func(b *testing.B) {
		for b.Loop() {
			if err := s.rdb.Get(ctx, "raw").Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("RawSet", func(b *testing.B) {
		for b.Loop() {
			if err := s.rdb.Set(ctx, "raw", doc, 0).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
