package kvindex

import (
	"context"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/neuronetes/neuronetes/demoagent/kvcache"
	"github.com/neuronetes/neuronetes/demoagent/kvpub"
	"github.com/neuronetes/neuronetes/gateway/kvevents"
)

// TestSubscriberFollowsDemoCache runs the demo agent's cache model and publisher on a real
// ZeroMQ socket, subscribes, and checks the index comes to hold exactly the cached prefix, then
// forgets the pod when it leaves the set.
func TestSubscriberFollowsDemoCache(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pub, err := kvevents.Listen(ctx, "tcp://127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	pool, err := kvcache.New(64, 16, true)
	if err != nil {
		t.Fatal(err)
	}
	rec := kvpub.NewRecorder(16)
	pool.SetObserver(rec)
	go rec.Run(ctx, pub, clock.RealClock{})

	x := &Index{}
	s := &Subscriber{Index: x, Retry: 50 * time.Millisecond}
	addr := "tcp://" + pub.Addr().String()
	s.Sync(ctx, map[string]bool{addr: true})

	tokens := make([]uint64, 80) // 5 blocks; the cache gets the first 3
	for i := range tokens {
		tokens[i] = uint64(1000 + i)
	}
	prompt := &Prompt{tokens: tokens}
	chain := kvcache.BlockHashes(tokens[:48], 16)
	for {
		// A PUB socket drops what it sends before the subscriber joined: store again until seen.
		pool.Reset()
		a, _ := pool.Allocate(chain, 48, 48)
		pool.Commit(a, chain)
		pool.Free(a)
		time.Sleep(20 * time.Millisecond)
		if n, bs, exact := x.Match(addr, prompt); exact && n == 3 && bs == 16 {
			break
		}
		if ctx.Err() != nil {
			n, _, exact := x.Match(addr, prompt)
			t.Fatalf("index never matched 3 blocks: %d, exact %v", n, exact)
		}
	}
	s.Sync(ctx, map[string]bool{})
	if s.Running() != 0 || x.Exact(addr) {
		t.Fatal("the subscription or the pod's index outlived the pod")
	}
}
