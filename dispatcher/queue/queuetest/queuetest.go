// Package queuetest is the conformance test every dispatcher queue provider passes against its
// real broker: group sharing, redelivery of a dead member's messages, keepalive, acknowledgement,
// lag, and at-most-once publishing per id.
package queuetest

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/dispatcher/queue"
)

// Record is a message read back from a destination.
type Record struct {
	Key     string
	Body    string
	Headers map[string]string
}

// Suite describes a provider on a live broker.
type Suite struct {
	// Provider under test.
	Provider queue.Provider
	// Options of the input queue (Queue, Group, URL, AckWait: keep AckWait short, ~1-2 s).
	Options queue.Options
	// Produce writes one input message (id may be "" for a broker-assigned id).
	Produce func(t *testing.T, id, key, body string)
	// Read returns every message in dest, in order.
	Read func(t *testing.T, dest string) []Record
	// Dest is a destination for outgoing messages.
	Dest string
	// Ready, when set, waits until both members hold a share of the queue (group rebalances).
	Ready func(t *testing.T)
	// Partitioned marks a broker whose group members own partitions (Kafka): a member joining
	// takes partitions, and their unacknowledged records, over whatever KeepAlive did; the
	// dispatcher's dedupe lease covers that case, so the new-member check is left out.
	Partitioned bool
}

func (s Suite) consumer(t *testing.T, member string) queue.Consumer {
	t.Helper()
	o := s.Options
	o.Member = member
	c, err := s.Provider.Consumer(context.Background(), o)
	if err != nil {
		t.Fatalf("consumer %s: %v", member, err)
	}
	return c
}

func fetchAll(t *testing.T, c queue.Consumer, want int, within time.Duration) []*queue.Message {
	t.Helper()
	var out []*queue.Message
	deadline := time.Now().Add(within)
	for len(out) < want && time.Now().Before(deadline) {
		ms, err := c.Fetch(context.Background(), want-len(out), 300*time.Millisecond)
		if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		out = append(out, ms...)
	}
	return out
}

func ids(ms []*queue.Message) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.ID)
	}
	sort.Strings(out)
	return out
}

// Run runs the conformance checks as subtests, in order (they share the queue).
func (s Suite) Run(t *testing.T) {
	ctx := context.Background()
	a, b := s.consumer(t, "member-a"), s.consumer(t, "member-b")
	defer b.Close()
	for _, c := range []queue.Consumer{a, b} {
		if _, err := c.Fetch(ctx, 1, 100*time.Millisecond); err != nil {
			t.Fatalf("first fetch: %v", err)
		}
	}
	if s.Ready != nil {
		s.Ready(t)
	}
	for i := 0; i < 6; i++ {
		s.Produce(t, fmt.Sprintf("id-%d", i), fmt.Sprintf("key-%d", i%2), fmt.Sprintf("body-%d", i))
	}
	t.Run("messages carry id, key, body", func(t *testing.T) {
		// A broker's lag can trail its acknowledged publishes (JetStream updates a consumer's
		// pending count asynchronously): it must reach 6 within a few seconds, and never pass it.
		deadline := time.Now().Add(5 * time.Second)
		for {
			lag, err := s.Provider.Lag(ctx, s.Options)
			if err == nil && lag == 6 {
				break
			}
			if err != nil || lag > 6 || time.Now().After(deadline) {
				t.Fatalf("lag before consuming = %d, %v; want 6", lag, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	var held []*queue.Message
	t.Run("group members share the messages", func(t *testing.T) {
		var got, rest []*queue.Message
		deadline := time.Now().Add(15 * time.Second)
		for len(got)+len(rest) < 6 && time.Now().Before(deadline) {
			ms, err := a.Fetch(ctx, min(3, 6-len(got)-len(rest)), 200*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ms...)
			if ms, err = b.Fetch(ctx, 6-len(got)-len(rest), 200*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			rest = append(rest, ms...)
		}
		all := append(append([]*queue.Message{}, got...), rest...)
		if len(all) != 6 || len(got) == 0 || len(rest) == 0 {
			t.Fatalf("fetched %v by a and %v by b, want all 6 shared by both", ids(got), ids(rest))
		}
		seen := map[string]bool{}
		for _, m := range all {
			if seen[m.ID] {
				t.Fatalf("message %s delivered twice before its ack deadline", m.ID)
			}
			seen[m.ID] = true
			var i int
			if _, err := fmt.Sscanf(m.ID, "id-%d", &i); err != nil || string(m.Body) != fmt.Sprintf("body-%d", i) || m.Key != fmt.Sprintf("key-%d", i%2) {
				t.Fatalf("message id=%q key=%q body=%q: producer id, key and body not carried", m.ID, m.Key, m.Body)
			}
		}
		held = got
		for _, m := range rest {
			if err := m.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("a dead member's messages go to a live one", func(t *testing.T) {
		if len(held) == 0 {
			t.Fatal("member a holds no message (the sharing check failed)")
		}
		// a "dies": its messages are neither acknowledged nor kept alive.
		_ = a.Close()
		got := fetchAll(t, b, len(held), 6*s.Options.AckWait+10*time.Second)
		if fmt.Sprint(ids(got)) != fmt.Sprint(ids(held)) {
			t.Fatalf("redelivered %v, want %v", ids(got), ids(held))
		}
		keep := got[0]
		for _, m := range got[1:] {
			_ = m.Ack(ctx)
		}
		// KeepAlive holds a message past its ack deadline.
		for i := 0; i < 8; i++ {
			time.Sleep(s.Options.AckWait / 4)
			if err := keep.KeepAlive(ctx); err != nil {
				t.Fatalf("keepalive: %v", err)
			}
		}
		if !s.Partitioned {
			c := s.consumer(t, "member-c")
			defer c.Close()
			if again := fetchAll(t, c, 1, s.Options.AckWait/2); len(again) != 0 {
				t.Fatalf("a kept-alive message was redelivered: %v", ids(again))
			}
		}
		_ = keep.Ack(ctx)
	})
	t.Run("lag drains to zero after the acks", func(t *testing.T) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			lag, err := s.Provider.Lag(ctx, s.Options)
			if err == nil && lag == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("lag = %d, %v; want 0", lag, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	t.Run("a second publish of an id is dropped", func(t *testing.T) {
		p, err := s.Provider.Publisher(ctx, s.Options.URL)
		if err != nil {
			t.Fatal(err)
		}
		since := time.Now().Add(-time.Minute)
		out := queue.Outgoing{Dest: s.Dest, ID: "ns/b/result/x1", Key: "k", Body: []byte("r1"), Headers: map[string]string{queue.HeaderMessageID: "x1"}}
		for i, rec := range []bool{false, true, true} {
			if err := p.Publish(ctx, out, rec, since); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
		other := out
		other.ID, other.Body, other.Headers = "ns/b/result/x2", []byte("r2"), map[string]string{queue.HeaderMessageID: "x2"}
		if err := p.Publish(ctx, other, false, since); err != nil {
			t.Fatal(err)
		}
		got := s.Read(t, s.Dest)
		if len(got) != 2 || got[0].Body != "r1" || got[1].Body != "r2" || got[0].Headers[queue.HeaderMessageID] != "x1" || got[0].Key != "k" {
			t.Fatalf("destination holds %+v, want r1 (key k, header message-id x1) once, then r2", got)
		}
	})
}
