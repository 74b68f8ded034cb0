// Package redisq is the Redis Streams provider of the dispatcher: a consumer group read with
// XREADGROUP by every replica, messages of a dead member claimed by the live ones with
// XAUTOCLAIM once idle for AckWait (a live member resets the idle time of what it works on),
// XACK after the result, and publishes that add an entry and an idempotency marker in one script.
//
// An input entry's fields: "body" (the payload; an entry without it is passed as its fields in
// JSON), "key" (the message key), "message-id" (the producer's id; default the entry id), and
// any others, passed on as headers. Outgoing entries have the same shape.
package redisq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/dispatcher/queue"
	"github.com/neuronetes/neuronetes/internal/queuelag"
	"github.com/neuronetes/neuronetes/internal/redisconn"
)

// Provider connects to Redis servers; clients are shared per URL.
type Provider struct {
	// Dial connects to Redis; nil dials directly. The dispatcher passes the egress policy's
	// dialer: queueConfig.url is user-chosen.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// DefaultURL is used when a binding names none (redis://host:port[/db]).
	DefaultURL string
	// MarkTTL is how long a publish marker is kept (default 24h): a republish of the same id
	// within it is dropped.
	MarkTTL time.Duration
	// DefaultConn, when set, completes the options of DefaultURL's client (the dispatcher's
	// own Redis user, password and TLS): a URL a ToolBinding names never gets them.
	DefaultConn func(*redis.Options) error

	mu      sync.Mutex
	clients map[string]*redis.Client
}

// Name implements queue.Provider.
func (p *Provider) Name() string { return "redis" }

func (p *Provider) client(url string) (*redis.Client, error) {
	if url == "" {
		url = p.DefaultURL
	}
	isDefault := url == p.DefaultURL
	if url == "" {
		return nil, errors.New("queueConfig.url: empty and the dispatcher has no default Redis URL (--redis-queue-url)")
	}
	if !strings.Contains(url, "://") {
		url = "redis://" + url
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.clients[url]; c != nil {
		return c, nil
	}
	o, err := redisconn.ParseURL("queueConfig.url", url)
	if err != nil {
		return nil, err
	}
	o.PoolSize = max(o.PoolSize, 64)
	if isDefault && p.DefaultConn != nil {
		if err := p.DefaultConn(o); err != nil {
			return nil, fmt.Errorf("default Redis of the dispatcher: %w", err)
		}
	}
	redisconn.SetDialer(o, p.Dial)
	c := redis.NewClient(o)
	if p.clients == nil {
		p.clients = map[string]*redis.Client{}
	}
	p.clients[url] = c
	return c, nil
}

// Close closes every client.
func (p *Provider) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for u, c := range p.clients {
		_ = c.Close()
		delete(p.clients, u)
	}
}

// Consumer implements queue.Provider: the group is created at the stream's start when missing
// (MKSTREAM).
func (p *Provider) Consumer(ctx context.Context, o queue.Options) (queue.Consumer, error) {
	c, err := p.client(o.URL)
	if err != nil {
		return nil, err
	}
	if o.Group == "" || o.Member == "" {
		return nil, fmt.Errorf("redis stream %s: consumer group and member names are required", o.Queue)
	}
	if err := c.XGroupCreateMkStream(ctx, o.Queue, o.Group, "0").Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return nil, fmt.Errorf("redis stream %s group %s: %w", o.Queue, o.Group, err)
	}
	return &consumer{c: c, o: o}, nil
}

type consumer struct {
	c *redis.Client
	o queue.Options

	mu        sync.Mutex
	lastClaim time.Time
	closed    bool
}

// Fetch implements queue.Consumer: entries idle for AckWait in other members' pending lists
// first (at most every AckWait/2), then new ones.
func (c *consumer) Fetch(ctx context.Context, max int, wait time.Duration) ([]*queue.Message, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, queue.ErrClosed
	}
	claim := time.Since(c.lastClaim) >= c.o.AckWait/2
	if claim {
		c.lastClaim = time.Now()
	}
	c.mu.Unlock()
	var out []*queue.Message
	if claim {
		msgs, _, err := c.c.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: c.o.Queue, Group: c.o.Group, Consumer: c.o.Member,
			MinIdle: c.o.AckWait, Start: "0-0", Count: int64(max)}).Result()
		if err != nil {
			return nil, fmt.Errorf("xautoclaim %s: %w", c.o.Queue, err)
		}
		for _, m := range msgs {
			out = append(out, c.wrap(m, 0))
		}
	}
	if len(out) >= max {
		return out, nil
	}
	block := wait
	if len(out) > 0 {
		block = -1 // do not block when claimed entries are waiting
	}
	res, err := c.c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: c.o.Group, Consumer: c.o.Member,
		Streams: []string{c.o.Queue, ">"}, Count: int64(max - len(out)), Block: block}).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		if len(out) > 0 {
			return out, nil
		}
		return nil, fmt.Errorf("xreadgroup %s: %w", c.o.Queue, err)
	}
	for _, s := range res {
		for _, m := range s.Messages {
			out = append(out, c.wrap(m, 1))
		}
	}
	return out, nil
}

func (c *consumer) wrap(m redis.XMessage, delivery int) *queue.Message {
	q := &queue.Message{ID: m.ID, Delivery: delivery, Headers: map[string]string{}}
	body, hasBody := m.Values["body"]
	for k, v := range m.Values {
		s := fmt.Sprint(v)
		switch k {
		case "body":
		case "key":
			q.Key = s
		case queue.HeaderMessageID:
			if s != "" {
				q.ID = s
			}
		default:
			q.Headers[strings.ToLower(k)] = s
		}
	}
	if hasBody {
		q.Body = []byte(fmt.Sprint(body))
	} else {
		q.Body, _ = json.Marshal(m.Values)
	}
	id := m.ID
	q.Ack = func(ctx context.Context) error { return c.c.XAck(ctx, c.o.Queue, c.o.Group, id).Err() }
	q.KeepAlive = func(ctx context.Context) error {
		// Resets the entry's idle time (this member keeps it).
		return c.c.XClaimJustID(ctx, &redis.XClaimArgs{Stream: c.o.Queue, Group: c.o.Group, Consumer: c.o.Member, MinIdle: 0, Messages: []string{id}}).Err()
	}
	return q
}

// Close implements queue.Consumer: pending entries stay in the group's pending list until a
// live member claims them after AckWait.
func (c *consumer) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return nil
}

// Publisher implements queue.Provider.
func (p *Provider) Publisher(_ context.Context, url string) (queue.Publisher, error) {
	c, err := p.client(url)
	if err != nil {
		return nil, err
	}
	ttl := p.MarkTTL
	if ttl <= 0 {
		ttl = 24 * time.Hour
	}
	return &publisher{c: c, ttl: ttl}, nil
}

type publisher struct {
	c   *redis.Client
	ttl time.Duration
}

// publishScript adds the entry only when the marker of its id was not set yet (KEYS[1] the
// stream, KEYS[2] the marker, ARGV[1] the marker TTL in ms, then field/value pairs).
var publishScript = redis.NewScript(`
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[1]) then return false end
local f = {}
for i = 2, #ARGV do f[#f + 1] = ARGV[i] end
return redis.call('XADD', KEYS[1], '*', unpack(f))`)

// markKey shares the stream's Redis Cluster slot (the tag is the stream key).
func markKey(dest, id string) string { return "neuronetes:published:{" + dest + "}:" + id }

// Publish implements queue.Publisher: the entry and its marker are written in one script, so
// a second publish of the id within MarkTTL adds nothing.
func (p *publisher) Publish(ctx context.Context, m queue.Outgoing, _ bool, _ time.Time) error {
	args := []any{p.ttl.Milliseconds(), "body", m.Body}
	if m.Key != "" {
		args = append(args, "key", m.Key)
	}
	for k, v := range m.Headers {
		if v != "" && k != "body" && k != "key" {
			args = append(args, k, v)
		}
	}
	err := publishScript.Run(ctx, p.c, []string{m.Dest, markKey(m.Dest, m.ID)}, args...).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("publish %s: %w", m.Dest, err)
	}
	return nil
}

// Lag implements queue.Provider: entries not yet delivered to the group plus delivered ones
// not acknowledged (XINFO GROUPS lag + pending); the stream length when the group is missing.
func (p *Provider) Lag(ctx context.Context, o queue.Options) (int64, error) {
	c, err := p.client(o.URL)
	if err != nil {
		return 0, err
	}
	return queuelag.Redis(ctx, c, o.Queue, o.Group)
}
