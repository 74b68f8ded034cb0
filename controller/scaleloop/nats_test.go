package scaleloop

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startNATS runs a real JetStream-enabled nats-server on 127.0.0.1 at a random port.
func startNATS(t testing.TB) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true})
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s.ClientURL()
}

func TestLagSource(t *testing.T) {
	url := startNATS(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "tasks", Subjects: []string{"agent.tasks"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "tasks", jetstream.ConsumerConfig{Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 150 {
		if _, err := js.Publish(ctx, "agent.tasks", fmt.Appendf(nil, "task-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Fetch 10 and ack 4: 140 pending + 6 ack-pending on the consumer; 146 in the stream.
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range batch.Messages() {
		if n < 4 {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
		n++
	}
	if n != 10 {
		t.Fatalf("fetched %d, want 10", n)
	}
	// The server updates a consumer's pending count asynchronously after
	// publishes and acks; wait until it settles before reading it through LagSource.
	waitConsumerSettled(ctx, t, cons, 146)
	var l LagSource
	defer l.Close()
	tests := []struct {
		name, url, queue string
		want             int64
		wantErr          bool
	}{
		{"consumer pending plus ack pending", url, "tasks/workers", 146, false},
		{"work-queue stream messages", url, "tasks", 146, false},
		{"consumer not created yet: the stream's messages", url, "tasks/nobody", 146, false},
		{"unknown stream", url, "nothing", 0, true},
		{"empty queue name", url, "", 0, true},
		{"no url", "", "tasks", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := l.Lag(ctx, tc.url, tc.queue)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("got %d, %v; want %d (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// waitConsumerSettled waits up to 5 s for the consumer's pending plus
// ack-pending count to reach want, and fails if it does not or goes above it.
func waitConsumerSettled(ctx context.Context, t *testing.T, cons jetstream.Consumer, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatalf("consumer info: %v", err)
		}
		got := int64(info.NumPending) + int64(info.NumAckPending)
		if got == want {
			return
		}
		if got > want || time.Now().After(deadline) {
			t.Fatalf("consumer pending+ack-pending = %d, want %d", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
