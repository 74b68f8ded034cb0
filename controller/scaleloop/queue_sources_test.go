package scaleloop

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

func queueBinding(provider, queue, url, group string, dispatch bool) *v1alpha1.ToolBinding {
	b := &v1alpha1.ToolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tb"}, Spec: v1alpha1.ToolBindingSpec{Type: "queue",
		QueueConfig: &v1alpha1.QueueConfig{Provider: provider, QueueName: queue, URL: url, ConsumerGroup: group}}}
	if dispatch {
		b.Spec.QueueConfig.Dispatch = &v1alpha1.DispatchConfig{ResponseQueue: "r", DeadLetterQueue: "d"}
	}
	return b
}

func TestNATSQueueName(t *testing.T) {
	for _, tc := range []struct {
		b    *v1alpha1.ToolBinding
		want string
	}{
		{queueBinding("nats", "S", "", "", false), "S"},
		{queueBinding("nats", "S/c", "", "g", true), "S/c"},
		{queueBinding("nats", "S", "", "g", false), "S/g"},
		{queueBinding("nats", "S", "", "", true), "S/neuronetes-ns-tb"},
	} {
		if got := NATSQueueName(tc.b); got != tc.want {
			t.Errorf("NATSQueueName(%+v) = %q, want %q", tc.b.Spec.QueueConfig, got, tc.want)
		}
	}
}

// TestKafkaLag on kfake (franz-go's in-process cluster speaking the Kafka protocol): all records
// are lag until the group commits, then the rest.
func TestKafkaLag(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "tasks"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := c.ListenAddrs()
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("tasks"), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := 0; i < 5; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "tasks", Key: []byte{byte(i)}, Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	q := &QueueLag{DefaultKafkaURL: "kafka://" + strings.Join(seeds, ",")}
	defer q.Close()
	l := &Loop{Queues: q}
	b := queueBinding("kafka", "tasks", "", "g", true)
	if n, err := l.providerLag(ctx, b, ""); err != nil || n != 5 {
		t.Fatalf("lag before commits = %d, %v; want 5", n, err)
	}
	var got []*kgo.Record
	for len(got) < 2 {
		fs := cl.PollRecords(ctx, 2-len(got))
		got = append(got, fs.Records()...)
	}
	if err := cl.CommitRecords(ctx, got...); err != nil {
		t.Fatal(err)
	}
	if n, err := l.providerLag(ctx, b, ""); err != nil || n < 3 || n > 4 {
		// Two records committed: 3 left, or 4 when both came from one partition and one of
		// them was not the partition's first (commits are prefixes).
		t.Fatalf("lag after committing two = %d, %v", n, err)
	}
	if _, err := (&QueueLag{}).Lag(ctx, b); err == nil || !strings.Contains(err.Error(), "--kafka-url") {
		t.Fatalf("no URL: %v", err)
	}
}

func TestRedisLag(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		rc.XAdd(ctx, &redis.XAddArgs{Stream: "tasks", Values: []any{"body", "x"}})
	}
	q := &QueueLag{DefaultRedisURL: srv.Addr}
	defer q.Close()
	l := &Loop{Queues: q}
	b := queueBinding("redis", "tasks", "", "", true)
	if n, err := l.providerLag(ctx, b, ""); err != nil || n != 4 {
		t.Fatalf("lag without the group = %d, %v; want 4 (stream length)", n, err)
	}
	if err := rc.XGroupCreate(ctx, "tasks", "neuronetes-ns-tb", "0").Err(); err != nil {
		t.Fatal(err)
	}
	res, err := rc.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "neuronetes-ns-tb", Consumer: "c", Streams: []string{"tasks", ">"}, Count: 3}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := l.providerLag(ctx, b, ""); n != 4 {
		t.Fatalf("lag with 3 pending = %d, want 4 (1 undelivered + 3 pending)", n)
	}
	rc.XAck(ctx, "tasks", "neuronetes-ns-tb", res[0].Messages[0].ID, res[0].Messages[1].ID)
	if n, _ := l.providerLag(ctx, b, ""); n != 2 {
		t.Fatalf("lag after 2 acks = %d, want 2", n)
	}
}
