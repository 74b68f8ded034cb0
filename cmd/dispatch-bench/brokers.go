package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/neuronetes/neuronetes/dispatcher/queue"
	"github.com/neuronetes/neuronetes/dispatcher/queue/kafkaq"
	"github.com/neuronetes/neuronetes/dispatcher/queue/natsq"
)

// broker is one provider's server with what a round needs.
type broker interface {
	provider() string
	url() string
	queueProvider() queue.Provider
	// prepare creates the input queue and the result destination of a round and starts
	// collecting results; it returns the queueName for the binding.
	prepare(round string) (queueName string, err error)
	produce(round string, i int) error
	flush() error
	// collect calls f with the message id of every message in dest (a subject, topic or stream),
	// from its start (NATS: from the call on).
	collect(dest string, f func(id string)) (stop func(), err error)
}

// natsBroker is nats-server embedded in the bench process (JetStream on).
type natsBroker struct {
	s  *server.Server
	nc *nats.Conn
	js jetstream.JetStream
	p  *natsq.Provider
}

func newNATS(dir string) (*natsBroker, error) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
	if err != nil {
		return nil, err
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		return nil, fmt.Errorf("nats-server not ready")
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		return nil, err
	}
	js, _ := jetstream.New(nc)
	return &natsBroker{s: s, nc: nc, js: js, p: &natsq.Provider{DefaultURL: s.ClientURL()}}, nil
}

func (b *natsBroker) provider() string               { return "nats" }
func (b *natsBroker) url() string                    { return b.s.ClientURL() }
func (b *natsBroker) queueProvider() queue.Provider  { return b.p }
func (b *natsBroker) close()                         { b.p.Close(); b.nc.Close(); b.s.Shutdown() }
func (b *natsBroker) stream(round string) string     { return "IN_" + strings.ReplaceAll(round, "-", "_") }
func (b *natsBroker) subject(round, s string) string { return s + "." + round }

func (b *natsBroker) prepare(round string) (string, error) {
	ctx := context.Background()
	if _, err := b.js.CreateStream(ctx, jetstream.StreamConfig{Name: b.stream(round), Subjects: []string{b.subject(round, "in")}}); err != nil {
		return "", err
	}
	_, err := b.js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT_" + b.stream(round), Subjects: []string{b.subject(round, "out"), b.subject(round, "dead")}})
	return b.stream(round), err
}

func (b *natsBroker) produce(round string, i int) error {
	m := nats.NewMsg(b.subject(round, "in"))
	m.Data = []byte(fmt.Sprintf("summarize document %d of round %s", i, round))
	m.Header.Set(queue.HeaderKey, fmt.Sprintf("k-%d", i%64))
	_, err := b.js.PublishMsgAsync(m, jetstream.WithMsgID(fmt.Sprintf("m-%d", i)))
	return err
}

func (b *natsBroker) flush() error {
	select {
	case <-b.js.PublishAsyncComplete():
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("nats publishes not acknowledged within 30s")
	}
}

func (b *natsBroker) collect(dest string, f func(id string)) (func(), error) {
	sub, err := b.nc.Subscribe(dest, func(m *nats.Msg) { f(m.Header.Get(queue.HeaderMessageID)) })
	if err != nil {
		return nil, err
	}
	return func() { _ = sub.Unsubscribe() }, b.nc.Flush()
}

// kafkaBroker is kfake, franz-go's in-process cluster speaking the Kafka protocol.
type kafkaBroker struct {
	c  *kfake.Cluster
	cl *kgo.Client
	p  *kafkaq.Provider
}

func newKafka() (*kafkaBroker, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(8))
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(time.Millisecond), kgo.AllowAutoTopicCreation())
	if err != nil {
		return nil, err
	}
	return &kafkaBroker{c: c, cl: cl, p: &kafkaq.Provider{DefaultURL: strings.Join(c.ListenAddrs(), ",")}}, nil
}

func (b *kafkaBroker) provider() string              { return "kafka" }
func (b *kafkaBroker) url() string                   { return strings.Join(b.c.ListenAddrs(), ",") }
func (b *kafkaBroker) queueProvider() queue.Provider { return b.p }
func (b *kafkaBroker) close()                        { b.p.Close(); b.cl.Close(); b.c.Close() }

func (b *kafkaBroker) prepare(round string) (string, error) {
	resp, err := kadm.NewClient(b.cl).CreateTopics(context.Background(), 8, 1, nil, "in-"+round, "out-"+round, "dead-"+round)
	if err == nil {
		err = resp.Error()
	}
	return "in-" + round, err
}

func (b *kafkaBroker) produce(round string, i int) error {
	b.cl.Produce(context.Background(), &kgo.Record{Topic: "in-" + round, Key: []byte(fmt.Sprintf("k-%d", i%64)),
		Value:   []byte(fmt.Sprintf("summarize document %d of round %s", i, round)),
		Headers: []kgo.RecordHeader{{Key: queue.HeaderMessageID, Value: []byte(fmt.Sprintf("m-%d", i))}}}, nil)
	return nil
}

func (b *kafkaBroker) flush() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return b.cl.Flush(ctx)
}

func (b *kafkaBroker) collect(dest string, f func(id string)) (func(), error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.c.ListenAddrs()...), kgo.ConsumeTopics(dest), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				for _, h := range r.Headers {
					if h.Key == queue.HeaderMessageID {
						f(string(h.Value))
					}
				}
			})
		}
	}()
	return func() { cancel(); wg.Wait(); cl.Close() }, nil
}
