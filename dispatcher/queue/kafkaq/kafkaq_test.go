package kafkaq

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/neuronetes/neuronetes/dispatcher/queue"
	"github.com/neuronetes/neuronetes/dispatcher/queue/queuetest"
)

func produce(t *testing.T, cl *kgo.Client, topic, id, key, body string) {
	t.Helper()
	r := &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(body)}
	if id != "" {
		r.Headers = []kgo.RecordHeader{{Key: queue.HeaderMessageID, Value: []byte(id)}}
	}
	if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func readTopic(t *testing.T, seeds []string, topic string) []queuetest.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []queuetest.Record
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			rec := queuetest.Record{Key: string(r.Key), Body: string(r.Value), Headers: map[string]string{}}
			for _, h := range r.Headers {
				rec.Headers[strings.ToLower(h.Key)] = string(h.Value)
			}
			out = append(out, rec)
		})
		if n == 0 {
			return out
		}
	}
}

// TestConformance runs against kfake, franz-go's in-process cluster speaking the Kafka protocol
// (no Kafka broker can be installed here).
func TestConformance(t *testing.T) {
	seeds := queuetest.StartKafka(t, 4, "in", "out")
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	p := &Provider{}
	t.Cleanup(p.Close)
	queuetest.Suite{
		Provider:    p,
		Options:     queue.Options{URL: "kafka://" + strings.Join(seeds, ","), Queue: "in", Group: "dispatch", AckWait: 1500 * time.Millisecond},
		Dest:        "out",
		Settle:      2 * time.Second,
		Partitioned: true,
		Produce:     func(t *testing.T, id, key, body string) { produce(t, cl, "in", id, key, body) },
		Read:        func(t *testing.T, dest string) []queuetest.Record { return readTopic(t, seeds, dest) },
	}.Run(t)
}

func TestTracker(t *testing.T) {
	tr := newTracker()
	rec := func(p int32, o int64) *kgo.Record { return &kgo.Record{Topic: "t", Partition: p, Offset: o} }
	rs := []*kgo.Record{rec(0, 10), rec(0, 11), rec(0, 12), rec(1, 5)}
	for _, r := range rs {
		tr.add(r)
	}
	for _, tc := range []struct {
		ack  *kgo.Record
		want string // committed offsets after the ack: partition:offset
	}{
		{rs[1], ""},     // 11 done, 10 still in flight: nothing to commit
		{rs[3], "1:5"},  // partition 1's only record
		{rs[0], "0:11"}, // 10 done: the prefix 10,11
		{rs[2], "0:12"}, // then 12
	} {
		if !tr.ack(tc.ack) {
			t.Fatalf("ack of %d@%d refused", tc.ack.Partition, tc.ack.Offset)
		}
		var got []string
		for _, r := range tr.commitable() {
			got = append(got, fmt.Sprintf("%d:%d", r.Partition, r.Offset))
		}
		if strings.Join(got, ",") != tc.want {
			t.Fatalf("after ack of %d@%d commitable = %v, want %q", tc.ack.Partition, tc.ack.Offset, got, tc.want)
		}
	}
	tr.add(rec(0, 13))
	tr.drop(map[string][]int32{"t": {0}})
	if tr.ack(rec(0, 13)) {
		t.Fatal("ack of a revoked partition's record accepted")
	}
}
