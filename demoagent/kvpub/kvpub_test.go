package kvpub

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/neuronetes/neuronetes/demoagent/kvcache"
	"github.com/neuronetes/neuronetes/gateway/kvevents"
)

type sink struct {
	mu sync.Mutex
	b  []kvevents.Batch
}

func (s *sink) Publish(b kvevents.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, b)
	return nil
}

func (s *sink) events() []kvevents.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []kvevents.Event
	for _, b := range s.b {
		out = append(out, b.Events...)
	}
	return out
}

// TestPublishesCacheEvents drives a real cache model and checks the published events carry the
// cache's own block hashes (as integers), the parent of a stored run and the block size, and no
// token ids (they would reveal prompts to every subscriber).
func TestPublishesCacheEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := kvcache.New(2, 4, true)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRecorder(4)
	pool.SetObserver(r)
	s := &sink{}
	go r.Run(ctx, s, clock.RealClock{})

	chain := kvcache.BlockHashes([]uint64{1, 2, 3, 4, 5, 6, 7, 8}, 4)
	a, _ := pool.Allocate(chain, 8, 8)
	pool.Commit(a, chain)
	pool.Free(a)
	other := kvcache.BlockHashes([]uint64{9, 9, 9, 9}, 4)
	b, _ := pool.Allocate(other, 4, 4) // evicts the tail of chain
	pool.Free(b)
	pool.Reset()

	want := []kvevents.Event{
		{Kind: kvevents.TagBlockStored, Hashes: []kvevents.Hash{kvevents.IntHash(chain[0]), kvevents.IntHash(chain[1])}, BlockSize: 4},
		{Kind: kvevents.TagBlockRemoved, Hashes: []kvevents.Hash{kvevents.IntHash(chain[1])}},
		{Kind: kvevents.TagAllBlocksCleared},
	}
	for ctx.Err() == nil && len(s.events()) < len(want) {
		time.Sleep(5 * time.Millisecond)
	}
	got := s.events()
	if len(got) != len(want) {
		t.Fatalf("got %d events %+v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Kind != w.Kind || len(g.Hashes) != len(w.Hashes) || g.BlockSize != w.BlockSize || g.Parent != "" || len(g.TokenIDs) != 0 {
			t.Errorf("event %d = %+v, want %+v", i, g, w)
			continue
		}
		for j := range w.Hashes {
			if g.Hashes[j] != w.Hashes[j] {
				t.Errorf("event %d hash %d = %x, want %x", i, j, g.Hashes[j], w.Hashes[j])
			}
		}
	}
	// The published batch survives the wire codec.
	p, err := kvevents.EncodeBatch(kvevents.Batch{Events: got[:1], DPRank: -1})
	if err != nil {
		t.Fatal(err)
	}
	back, err := kvevents.DecodeBatch(p)
	if err != nil || back.Events[0].Hashes[1] != kvevents.IntHash(chain[1]) {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}
