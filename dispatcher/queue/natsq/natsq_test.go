package natsq

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/neuronetes/neuronetes/dispatcher/queue"
	"github.com/neuronetes/neuronetes/dispatcher/queue/queuetest"
)

// setup starts nats-server with an input stream IN (subject in) and an output stream OUT
// (subjects out and dlq) and returns the URL and a JetStream handle.
func setup(t *testing.T) (string, jetstream.JetStream) {
	t.Helper()
	url := queuetest.StartNATS(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	for name, subj := range map[string][]string{"IN": {"in"}, "OUT": {"out", "dlq"}} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subj, Duplicates: 2 * time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	return url, js
}

func TestConformance(t *testing.T) {
	url, js := setup(t)
	p := &Provider{ClientName: "test"}
	t.Cleanup(p.Close)
	queuetest.Suite{
		Provider: p,
		Options:  queue.Options{URL: url, Queue: "IN", Group: "dispatch", AckWait: 1500 * time.Millisecond},
		Dest:     "out",
		Produce: func(t *testing.T, id, key, body string) {
			m := nats.NewMsg("in")
			m.Data = []byte(body)
			m.Header.Set(queue.HeaderKey, key)
			if _, err := js.PublishMsg(context.Background(), m, jetstream.WithMsgID(id)); err != nil {
				t.Fatal(err)
			}
		},
		Read: func(t *testing.T, dest string) []queuetest.Record {
			return readSubject(t, js, "OUT", dest)
		},
	}.Run(t)
}

func readSubject(t *testing.T, js jetstream.JetStream, stream, subject string) []queuetest.Record {
	t.Helper()
	ctx := context.Background()
	c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	var out []queuetest.Record
	for {
		b, err := c.FetchNoWait(100)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range b.Messages() {
			n++
			r := queuetest.Record{Body: string(m.Data()), Headers: map[string]string{}, Key: m.Headers().Get(queue.HeaderKey)}
			for k, v := range m.Headers() {
				r.Headers[strings.ToLower(k)] = v[0]
			}
			out = append(out, r)
		}
		if n == 0 {
			return out
		}
	}
}

func TestConsumerErrors(t *testing.T) {
	url, _ := setup(t)
	p := &Provider{}
	t.Cleanup(p.Close)
	ctx := context.Background()
	for _, tc := range []struct {
		o    queue.Options
		want string
	}{
		{queue.Options{URL: url, Queue: "IN"}, "names no consumer"},
		{queue.Options{URL: url, Queue: "IN/a/b"}, "want <stream> or <stream>/<consumer>"},
		{queue.Options{URL: url, Queue: "MISSING/c"}, "MISSING"},
		{queue.Options{Queue: "IN/c"}, "no default NATS URL"},
	} {
		if _, err := p.Consumer(ctx, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Consumer(%+v) = %v, want an error containing %q", tc.o, err, tc.want)
		}
	}
	if err := p.CheckSubject(ctx, url, "out"); err != nil {
		t.Errorf("out is captured: %v", err)
	}
	if err := p.CheckSubject(ctx, url, "nowhere"); err == nil || !strings.Contains(err.Error(), `"nowhere"`) {
		t.Errorf("CheckSubject(nowhere) = %v", err)
	}
}
