// Package kafkaq is the Kafka provider of the dispatcher (franz-go): a consumer group with
// cooperative-sticky partition assignment shared by every replica, records handled concurrently
// and committed up to the acknowledged prefix of each partition, partitions of a dead member
// reassigned after the session timeout, and results produced with the idempotent producer.
//
// Kafka has no per-id deduplication of produced records across producer sessions. A publish
// that may have happened before (the dispatcher died between producing and recording it) first
// searches the destination from the time the outcome was stored for a record with the same
// neuronetes-publish-id header, and produces only when none is found.
package kafkaq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/dispatcher/queue"
	"github.com/neuronetes/neuronetes/internal/kafkaconn"
)

// HeaderPublishID carries an outgoing record's idempotency id.
const HeaderPublishID = "neuronetes-publish-id"

// Provider connects to Kafka clusters.
type Provider struct {
	// Dial connects to brokers (seeds and the brokers their metadata names); nil dials directly.
	// The dispatcher passes the egress policy's dialer: queueConfig.url is user-chosen. A
	// kafkas:// URL does its TLS handshake over Dial's connection (internal/kafkaconn).
	Dial func(ctx context.Context, network, host string) (net.Conn, error)
	// DefaultURL is used when a binding names none; its form is queueConfig.url's
	// (internal/kafkaconn: host:port[,...], kafka://, kafkas:// with optional SASL).
	DefaultURL string

	mu     sync.Mutex
	shared map[string]*sharedClient // producers and admin clients per URL
}

// sharedClient is the non-group client of one URL and the options it was built with (the
// search for an earlier publish builds its own consumer from them).
type sharedClient struct {
	cl   *kgo.Client
	opts []kgo.Opt
}

// Name implements queue.Provider.
func (p *Provider) Name() string { return "kafka" }

// conn parses the URL of a binding (DefaultURL when empty); the whole URL, returned as key,
// tells shared clients apart (two URLs of the same seeds may differ in TLS or credentials).
func (p *Provider) conn(url string) (o *kafkaconn.Options, key string, err error) {
	field := "queueConfig.url"
	if url == "" {
		url, field = p.DefaultURL, "--kafka-url"
	}
	if url == "" {
		return nil, "", errors.New("queueConfig.url: empty and the dispatcher has no default Kafka URL (--kafka-url)")
	}
	o, err = kafkaconn.ParseURL(field, url)
	return o, url, err
}

// client returns the shared non-group client of url (producer and admin).
func (p *Provider) client(url string) (*sharedClient, error) {
	o, k, err := p.conn(url)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.shared[k]; c != nil {
		return c, nil
	}
	opts := o.Opts(p.Dial)
	c, err := kgo.NewClient(append(slices.Clip(opts), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))...)
	if err != nil {
		return nil, fmt.Errorf("kafka %s: %w", o, err)
	}
	if p.shared == nil {
		p.shared = map[string]*sharedClient{}
	}
	p.shared[k] = &sharedClient{cl: c, opts: opts}
	return p.shared[k], nil
}

// Close closes the shared clients.
func (p *Provider) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, c := range p.shared {
		c.cl.Close()
		delete(p.shared, k)
	}
}

// Consumer implements queue.Provider. The session timeout is AckWait (at least 6 s, the
// brokers' usual minimum): a member silent that long loses its partitions.
func (p *Provider) Consumer(ctx context.Context, o queue.Options) (queue.Consumer, error) {
	conn, _, err := p.conn(o.URL)
	if err != nil {
		return nil, err
	}
	if o.Group == "" {
		return nil, fmt.Errorf("kafka topic %s: consumer group required", o.Queue)
	}
	session := max(o.AckWait, 6*time.Second)
	c := &consumer{t: newTracker(), topic: o.Queue, revokeWait: max(o.AckWait, time.Second), log: klog.FromContext(ctx).WithValues("topic", o.Queue, "group", o.Group)}
	cl, err := kgo.NewClient(append(conn.Opts(p.Dial), kgo.ConsumerGroup(o.Group), kgo.ConsumeTopics(o.Queue),
		kgo.ClientID("neuronetes-dispatcher-"+o.Member), kgo.DisableAutoCommit(),
		kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.SessionTimeout(session), kgo.HeartbeatInterval(session/5),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(time.Second),
		kgo.OnPartitionsRevoked(c.revoked), kgo.OnPartitionsLost(c.lost))...)
	if err != nil {
		return nil, fmt.Errorf("kafka %s consumer %s group %s: %w", conn, o.Queue, o.Group, err)
	}
	c.cl = cl
	c.stop = make(chan struct{})
	c.wg.Add(1)
	go c.commitLoop()
	return c, nil
}

type consumer struct {
	cl         *kgo.Client
	t          *tracker
	topic      string
	revokeWait time.Duration
	log        klog.Logger

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// Fetch implements queue.Consumer.
func (c *consumer) Fetch(ctx context.Context, max int, wait time.Duration) ([]*queue.Message, error) {
	select {
	case <-c.stop:
		return nil, queue.ErrClosed
	default:
	}
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	fs := c.cl.PollRecords(pctx, max)
	if fs.IsClientClosed() {
		return nil, queue.ErrClosed
	}
	var errs []error
	for _, e := range fs.Errors() {
		if !errors.Is(e.Err, context.DeadlineExceeded) && !errors.Is(e.Err, context.Canceled) {
			errs = append(errs, fmt.Errorf("%s[%d]: %w", e.Topic, e.Partition, e.Err))
		}
	}
	var out []*queue.Message
	fs.EachRecord(func(r *kgo.Record) {
		c.t.add(r)
		out = append(out, c.wrap(r))
	})
	if len(out) == 0 && len(errs) > 0 {
		return nil, fmt.Errorf("kafka fetch: %w", errors.Join(errs...))
	}
	return out, nil
}

func (c *consumer) wrap(r *kgo.Record) *queue.Message {
	m := &queue.Message{Key: string(r.Key), Body: r.Value, Headers: map[string]string{}}
	for _, h := range r.Headers {
		m.Headers[strings.ToLower(h.Key)] = string(h.Value)
	}
	m.ID = m.Headers[queue.HeaderMessageID]
	if m.ID == "" {
		m.ID = fmt.Sprintf("%s-%d-%d", r.Topic, r.Partition, r.Offset)
	}
	m.Ack = func(context.Context) error {
		if !c.t.ack(r) {
			return fmt.Errorf("kafka %s[%d]@%d: partition revoked before the ack", r.Topic, r.Partition, r.Offset)
		}
		return nil
	}
	m.KeepAlive = func(context.Context) error { return nil } // the group heartbeat keeps the partition
	return m
}

// commitLoop commits the acknowledged prefixes every 100 ms.
func (c *consumer) commitLoop() {
	defer c.wg.Done()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.commit(context.Background())
		}
	}
}

func (c *consumer) commit(ctx context.Context) {
	rs := c.t.commitable()
	if len(rs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.cl.CommitRecords(ctx, rs...); err != nil {
		// Uncommitted records are delivered again and acknowledged as duplicates.
		c.log.V(1).Info("Offset commit failed", "err", err)
	}
}

// revoked waits (bounded) for the records of the revoked partitions to be acknowledged,
// commits them and forgets the partitions.
func (c *consumer) revoked(ctx context.Context, _ *kgo.Client, parts map[string][]int32) {
	deadline := time.Now().Add(c.revokeWait)
	c.t.mu.Lock()
	for c.t.inFlight(parts) > 0 && time.Now().Before(deadline) {
		c.t.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		c.t.mu.Lock()
	}
	c.t.mu.Unlock()
	c.commit(ctx)
	c.t.drop(parts)
}

// lost forgets the partitions without committing (the group moved on).
func (c *consumer) lost(_ context.Context, _ *kgo.Client, parts map[string][]int32) {
	c.t.drop(parts)
}

// Close implements queue.Consumer: leaves the group after committing what was acknowledged.
func (c *consumer) Close() error {
	c.closeOnce.Do(func() {
		close(c.stop)
		c.wg.Wait()
		c.commit(context.Background())
		c.cl.Close()
	})
	return nil
}

// Publisher implements queue.Provider.
func (p *Provider) Publisher(_ context.Context, url string) (queue.Publisher, error) {
	c, err := p.client(url)
	if err != nil {
		return nil, err
	}
	return &publisher{cl: c.cl, adm: kadm.NewClient(c.cl), opts: c.opts}, nil
}

type publisher struct {
	cl   *kgo.Client
	adm  *kadm.Client
	opts []kgo.Opt // the URL's connection options (internal/kafkaconn)
}

// Publish implements queue.Publisher.
func (p *publisher) Publish(ctx context.Context, m queue.Outgoing, recovering bool, since time.Time) error {
	if recovering {
		found, err := p.published(ctx, m.Dest, m.ID, since)
		if err != nil {
			return fmt.Errorf("publish %s: search for %s: %w", m.Dest, m.ID, err)
		}
		if found {
			return nil
		}
	}
	r := &kgo.Record{Topic: m.Dest, Value: m.Body, Headers: []kgo.RecordHeader{{Key: HeaderPublishID, Value: []byte(m.ID)}}}
	if m.Key != "" {
		r.Key = []byte(m.Key)
	}
	for k, v := range m.Headers {
		if v != "" {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	if err := p.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return fmt.Errorf("publish %s: %w", m.Dest, err)
	}
	return nil
}
