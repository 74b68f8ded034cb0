package kvevents

import (
	"context"
	"testing"
	"time"
)

// TestPubSubOverZeroMQ sends batches through a real PUB socket to a real SUB socket on loopback
// and checks the frames arrive as vLLM frames them: topic, sequence counting up, batch intact.
func TestPubSubOverZeroMQ(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pub, err := Listen(ctx, "tcp://127.0.0.1:0", "kv-events")
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	got := make(chan Message, 100)
	go func() {
		_ = Subscribe(ctx, "tcp://"+pub.Addr().String(), 50*time.Millisecond, nil,
			func(m Message) { got <- m }, nil)
	}()
	stored := Event{Kind: TagBlockStored, Hashes: []Hash{IntHash(7), IntHash(8)}, BlockSize: 16, TokenIDs: []uint32{}}
	var first Message
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
wait: // a PUB socket drops what it sends before the subscriber has joined: send until one arrives
	for {
		select {
		case first = <-got:
			break wait
		case <-tick.C:
			if err := pub.Publish(Batch{TS: 1, Events: []Event{stored}, DPRank: -1}); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("no message arrived")
		}
	}
	if first.Topic != "kv-events" || len(first.Batch.Events) != 1 || first.Batch.Events[0].Hashes[1] != IntHash(8) {
		t.Fatalf("first message = %+v", first)
	}
	if err := pub.Publish(Batch{TS: 2, Events: []Event{{Kind: TagAllBlocksCleared}}, DPRank: -1}); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case m := <-got:
			if m.Batch.Events[0].Kind != TagAllBlocksCleared {
				continue // a retry of the first batch still in flight
			}
			if m.Seq <= first.Seq {
				t.Fatalf("sequence %d after %d, want it to grow", m.Seq, first.Seq)
			}
			return
		case <-ctx.Done():
			t.Fatal("second message did not arrive")
		}
	}
}

// TestSubscribeRedials checks that a subscriber started before its publisher connects once the
// publisher is up (a pod's engine starting after the gateway).
func TestSubscribeRedials(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	probe, err := Listen(ctx, "tcp://127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	_ = probe.Close()
	connected := make(chan struct{}, 10)
	got := make(chan Message, 100)
	go func() {
		_ = Subscribe(ctx, "tcp://"+addr, 50*time.Millisecond, func() { connected <- struct{}{} },
			func(m Message) { got <- m }, nil)
	}()
	time.Sleep(200 * time.Millisecond)
	pub, err := Listen(ctx, "tcp://"+addr, "")
	if err != nil {
		t.Skipf("port %s was taken meanwhile: %v", addr, err)
	}
	defer pub.Close()
	select {
	case <-connected:
	case <-ctx.Done():
		t.Fatal("never connected")
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-got:
			return
		case <-tick.C:
			_ = pub.Publish(Batch{Events: []Event{{Kind: TagAllBlocksCleared}}, DPRank: -1})
		case <-ctx.Done():
			t.Fatal("no message after redial")
		}
	}
}
