package queuetest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/twmb/franz-go/pkg/kfake"
)

// StartNATS runs a real nats-server (the server's own code, embedded) with JetStream on
// 127.0.0.1 and returns its client URL; it stops at the end of the test.
func StartNATS(t testing.TB) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s.ClientURL()
}

// StartKafka runs franz-go's kfake, an in-process cluster that speaks the Kafka protocol, with
// the given topics (partitions each) on 127.0.0.1, and returns its seed addresses.
func StartKafka(t testing.TB, partitions int32, topics ...string) []string {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1)}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(partitions, topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}
