// Package natsq is the NATS JetStream provider of the dispatcher: a durable pull consumer shared
// by every replica (the work is split by the server; a message unacknowledged within AckWait goes
// to another replica), in-progress acks while a message is worked on, and publishes with
// Nats-Msg-Id so that the response stream drops a second copy of a result (JetStream's duplicate
// window).
package natsq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/neuronetes/neuronetes/dispatcher/queue"
	"github.com/neuronetes/neuronetes/internal/credurl"
	"github.com/neuronetes/neuronetes/internal/queuelag"
)

// Provider connects to NATS servers; connections are shared per URL.
type Provider struct {
	// DefaultURL is used when a binding names none.
	DefaultURL string
	// ClientName is the client name sent to the server.
	ClientName string
	// Dial connects to servers (the URL's and those the cluster advertises); nil dials
	// directly. The dispatcher passes the egress policy's dialer: queueConfig.url is user-chosen.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	mu    sync.Mutex
	conns map[string]*nats.Conn
}

// Name implements queue.Provider.
func (p *Provider) Name() string { return "nats" }

// SplitQueue splits a queueName "<stream>" or "<stream>/<consumer>".
func SplitQueue(q string) (stream, consumer string, err error) {
	stream, consumer, _ = strings.Cut(q, "/")
	if stream == "" || strings.Contains(consumer, "/") {
		return "", "", fmt.Errorf("queueConfig.queueName %q: want <stream> or <stream>/<consumer>", q)
	}
	return stream, consumer, nil
}

func (p *Provider) js(url string) (jetstream.JetStream, error) {
	if url == "" {
		url = p.DefaultURL
	}
	if url == "" {
		return nil, errors.New("queueConfig.url: empty and the dispatcher has no default NATS URL (--nats-url)")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		p.conns = map[string]*nats.Conn{}
	}
	nc := p.conns[url]
	if nc == nil || nc.IsClosed() {
		var err error
		opts := []nats.Option{nats.Name(p.ClientName), nats.MaxReconnects(-1), nats.ReconnectWait(500 * time.Millisecond), nats.Timeout(5 * time.Second)}
		if p.Dial != nil {
			opts = append(opts, nats.SetCustomDialer(ctxDialer(p.Dial)))
		}
		nc, err = nats.Connect(url, opts...)
		if err != nil {
			return nil, fmt.Errorf("connect %s: %w", credurl.Redact(url), credurl.Error(err, url))
		}
		p.conns[url] = nc
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream %s: %w", credurl.Redact(url), credurl.Error(err, url))
	}
	return js, nil
}

// Close closes every connection.
func (p *Provider) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for u, c := range p.conns {
		c.Close()
		delete(p.conns, u)
	}
}

// consumerName is the durable consumer: the one in queueName, else the group.
func consumerName(o queue.Options) (stream, name string, err error) {
	stream, name, err = SplitQueue(o.Queue)
	if err != nil {
		return "", "", err
	}
	if name == "" {
		name = o.Group
	}
	if name == "" {
		return "", "", fmt.Errorf("queueConfig.queueName %q names no consumer and no consumerGroup is set", o.Queue)
	}
	return stream, name, nil
}

// Consumer implements queue.Provider: the durable pull consumer is created when missing
// (explicit acks, AckWait from o, unlimited redeliveries: the dispatcher counts attempts itself)
// and used as it is when it exists.
func (p *Provider) Consumer(ctx context.Context, o queue.Options) (queue.Consumer, error) {
	js, err := p.js(o.URL)
	if err != nil {
		return nil, err
	}
	stream, name, err := consumerName(o)
	if err != nil {
		return nil, err
	}
	c, err := js.Consumer(ctx, stream, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		c, err = js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable: name, AckPolicy: jetstream.AckExplicitPolicy, AckWait: o.AckWait, MaxDeliver: -1,
			MaxAckPending: 100000, DeliverPolicy: jetstream.DeliverAllPolicy,
			Description: "neuronetes dispatcher",
		})
		if errors.Is(err, jetstream.ErrConsumerExists) {
			c, err = js.Consumer(ctx, stream, name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("consumer %s/%s: %w", stream, name, err)
	}
	return &consumer{c: c, stream: stream, pending: make(chan delivered, 1024)}, nil
}

type consumer struct {
	c      jetstream.Consumer
	stream string

	mu      sync.Mutex
	active  bool // a pull request is open; its messages arrive on pending
	pending chan delivered
	closed  bool
}

// delivered is a message received and not handed out yet.
type delivered struct {
	q *queue.Message
	m jetstream.Msg
}

// Fetch implements queue.Consumer. One pull request of at most max messages is open at a time;
// its messages are handed out as they arrive (a message that arrives after this call returns
// is handed out by the next one).
func (c *consumer) Fetch(ctx context.Context, max int, wait time.Duration) ([]*queue.Message, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, queue.ErrClosed
	}
	if !c.active && len(c.pending) == 0 {
		b, err := c.c.Fetch(min(max, cap(c.pending)), jetstream.FetchMaxWait(wait))
		if err != nil {
			c.mu.Unlock()
			return nil, fmt.Errorf("fetch %s: %w", c.stream, err)
		}
		c.active = true
		go c.drain(b)
	}
	c.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	var out []*queue.Message
	select {
	case d := <-c.pending:
		out = append(out, d.q)
	case <-t.C:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for len(out) < max {
		select {
		case d := <-c.pending:
			out = append(out, d.q)
		default:
			return out, nil
		}
	}
	return out, nil
}

func (c *consumer) drain(b jetstream.MessageBatch) {
	for m := range b.Messages() {
		c.pending <- delivered{q: c.wrap(m), m: m}
	}
	c.mu.Lock()
	c.active = false
	c.mu.Unlock()
}

func (c *consumer) wrap(m jetstream.Msg) *queue.Message {
	q := &queue.Message{Body: m.Data(), Headers: map[string]string{}}
	for k, v := range m.Headers() {
		if len(v) > 0 {
			q.Headers[strings.ToLower(k)] = v[0]
		}
	}
	q.ID = m.Headers().Get(jetstream.MsgIDHeader)
	q.Key = q.Headers[queue.HeaderKey]
	if md, err := m.Metadata(); err == nil {
		if q.ID == "" {
			q.ID = fmt.Sprintf("%s:%d", md.Stream, md.Sequence.Stream)
		}
		q.Delivery = int(md.NumDelivered)
	}
	if q.ID == "" {
		q.ID = m.Subject() + ":" + m.Reply()
	}
	q.Ack = func(context.Context) error { return m.Ack() }
	q.KeepAlive = func(context.Context) error { return m.InProgress() }
	return q
}

// Close implements queue.Consumer: messages received and not handed out are given back at once
// (a message still in flight from an open pull request goes back after AckWait).
func (c *consumer) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	for {
		select {
		case d := <-c.pending:
			_ = d.m.Nak()
		default:
			return nil
		}
	}
}

// Publisher implements queue.Provider.
func (p *Provider) Publisher(_ context.Context, url string) (queue.Publisher, error) {
	js, err := p.js(url)
	if err != nil {
		return nil, err
	}
	return publisher{js}, nil
}

type publisher struct{ js jetstream.JetStream }

// Publish implements queue.Publisher: a JetStream publish with Nats-Msg-Id, so a second copy
// within the stream's duplicate window is dropped by the server (recovering changes nothing).
func (p publisher) Publish(ctx context.Context, m queue.Outgoing, _ bool, _ time.Time) error {
	msg := nats.NewMsg(m.Dest)
	msg.Data = m.Body
	for k, v := range m.Headers {
		if v != "" {
			msg.Header.Set(k, v)
		}
	}
	if m.Key != "" {
		msg.Header.Set(queue.HeaderKey, m.Key)
	}
	if _, err := p.js.PublishMsg(ctx, msg, jetstream.WithMsgID(m.ID)); err != nil {
		return fmt.Errorf("publish %s: %w", m.Dest, err)
	}
	return nil
}

// CheckSubject returns an error when no JetStream stream captures subject (a publish there would
// fail, and results must be stored to be deduplicated).
func (p *Provider) CheckSubject(ctx context.Context, url, subject string) error {
	js, err := p.js(url)
	if err != nil {
		return err
	}
	if _, err := js.StreamNameBySubject(ctx, subject); err != nil {
		return fmt.Errorf("no JetStream stream captures subject %q: %w", subject, err)
	}
	return nil
}

// Lag implements queue.Provider: the consumer's pending plus ack-pending messages, or the
// stream's message count when the consumer does not exist yet.
func (p *Provider) Lag(ctx context.Context, o queue.Options) (int64, error) {
	js, err := p.js(o.URL)
	if err != nil {
		return 0, err
	}
	stream, name, err := consumerName(o)
	if err != nil {
		return 0, err
	}
	return queuelag.NATS(ctx, js, stream, name)
}

// ctxDialer adapts a context dialer to nats.CustomDialer; nats.Timeout bounds each dial.
type ctxDialer func(ctx context.Context, network, addr string) (net.Conn, error)

func (d ctxDialer) Dial(network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return d(ctx, network, addr)
}
