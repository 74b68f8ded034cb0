package store

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

// TestNoEvictionAtMaxmemory fills a Redis running the chart's configuration
// (noeviction) with a small maxmemory: a write past the cap fails loudly as
// ErrUnavailable naming the OOM reply, and every session acknowledged before
// it is still readable (none was evicted to make room).
func TestNoEvictionAtMaxmemory(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{ConfigFile: redistest.ChartConfig(), Args: []string{"--maxmemory", "3mb"}})
	s := newStore(t, srv.Addr, "full", ring(t, "k", 1, "k"), Options{})
	ctx := context.Background()
	noise := make([]byte, 12<<10)
	var acked []string
	var werr error
	for i := range 1000 {
		rand.Read(noise) // incompressible: each session takes its size in Redis
		id := fmt.Sprintf("c%04d", i)
		if _, werr = s.Put(ctx, id, []byte(`{"n":"`+base64.StdEncoding.EncodeToString(noise)+`"}`), -1, 0); werr != nil {
			break
		}
		acked = append(acked, id)
	}
	if !errors.Is(werr, ErrUnavailable) || !strings.Contains(werr.Error(), "OOM") {
		t.Fatalf("write past maxmemory after %d sessions: %v, want ErrUnavailable naming OOM", len(acked), werr)
	}
	if len(acked) == 0 {
		t.Fatal("no write fit under maxmemory")
	}
	for _, id := range acked {
		if _, err := s.Get(ctx, id); err != nil {
			t.Fatalf("session %s acknowledged before the cap: %v (evicted?)", id, err)
		}
	}
	t.Logf("%d sessions stored before the cap; none evicted", len(acked))
}
