package quota

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

func TestShare(t *testing.T) {
	for _, tc := range []struct{ capacity, replicas, want int }{
		{8, 1, 8}, {8, 2, 4}, {9, 2, 4}, {8, 3, 2}, {2, 4, 1}, {0, 2, 0}, {8, 0, 8},
	} {
		if got := Share(tc.capacity, tc.replicas); got != tc.want {
			t.Errorf("Share(%d, %d) = %d, want %d", tc.capacity, tc.replicas, got, tc.want)
		}
		if tc.replicas > 1 && tc.capacity >= tc.replicas && Share(tc.capacity, tc.replicas)*tc.replicas > tc.capacity {
			t.Errorf("shares of %d among %d add up to more", tc.capacity, tc.replicas)
		}
	}
}

// TestPeers: replicas sharing a Redis count each other; one that stops announcing is counted
// out after PeerTTL, one that leaves at once.
func TestPeers(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	ctx := context.Background()
	now := time.Now()
	clock := func() time.Time { return now }
	a := &Peers{Client: rc, Prefix: "gw:", Now: clock}
	b := &Peers{Client: rc, Prefix: "gw:", Now: clock}
	c := &Peers{Client: rc, Prefix: "gw:", Now: clock}
	for _, p := range []*Peers{a, b, c} {
		if err := p.Beat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Beat(ctx); err != nil || a.Count() != 3 {
		t.Fatalf("count %d (%v), want 3", a.Count(), err)
	}
	c.Leave(ctx)
	if _ = a.Beat(ctx); a.Count() != 2 {
		t.Fatalf("after a leave: %d, want 2", a.Count())
	}
	now = now.Add(PeerTTL + time.Second) // b stops announcing
	if _ = a.Beat(ctx); a.Count() != 1 {
		t.Fatalf("after b's announcement expired: %d, want 1", a.Count())
	}
	if (&Peers{}).Count() != 1 || (*Peers)(nil).Count() != 1 {
		t.Fatal("a replica without Redis counts itself only")
	}
}
