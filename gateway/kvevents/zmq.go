package kvevents

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Publisher is a ZeroMQ PUB socket that sends event batches in vLLM's framing: topic, an 8-byte
// big-endian sequence number counting from 0, and the msgpack batch. As with any PUB socket, a
// subscriber that is not connected when a batch is sent does not get it; the sequence number lets
// it see the gap. All ZeroMQ work is done by github.com/go-zeromq/zmq4 (pure Go).
type Publisher struct {
	topic string

	mu   sync.Mutex
	sock zmq4.Socket
	seq  uint64
}

// Listen binds a publisher to endpoint, vLLM's KVEventsConfig.endpoint form ("tcp://*:5557").
func Listen(ctx context.Context, endpoint, topic string) (*Publisher, error) {
	sock := zmq4.NewPub(ctx, zmq4.WithTimeout(time.Second))
	if err := sock.Listen(endpoint); err != nil {
		_ = sock.Close()
		return nil, fmt.Errorf("kv events: listen on %s: %w", endpoint, err)
	}
	return &Publisher{topic: topic, sock: sock}, nil
}

// Addr is the address the publisher listens on.
func (p *Publisher) Addr() net.Addr { return p.sock.Addr() }

// Publish sends one batch with the next sequence number.
func (p *Publisher) Publish(b Batch) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	frames, err := Message{Topic: p.topic, Seq: p.seq, Batch: b}.Frames()
	if err != nil {
		return err
	}
	p.seq++
	if err := p.sock.SendMulti(zmq4.NewMsgFrom(frames...)); err != nil {
		return fmt.Errorf("kv events: publish: %w", err)
	}
	return nil
}

// Close closes the socket.
func (p *Publisher) Close() error { return p.sock.Close() }

// ErrSubscriptionEnded is returned by Subscribe when ctx ends.
var ErrSubscriptionEnded = errors.New("kv event subscription ended")

// Subscribe connects a SUB socket to endpoint ("tcp://10.0.0.5:5557"), subscribed to every topic,
// and calls fn with each message until ctx ends, redialling after retry when the connection cannot
// be made or is lost. connected is called (if not nil) each time a connection is made: messages
// sent while disconnected are lost, so the caller must not trust the sequence across it. A message
// that does not parse is passed to bad (if not nil) and skipped.
func Subscribe(ctx context.Context, endpoint string, retry time.Duration, connected func(), fn func(Message), bad func(error)) error {
	for ctx.Err() == nil {
		err := subscribeOnce(ctx, endpoint, connected, fn, bad)
		if ctx.Err() != nil {
			break
		}
		if bad != nil && err != nil {
			bad(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
	return ErrSubscriptionEnded
}

func subscribeOnce(ctx context.Context, endpoint string, connected func(), fn func(Message), bad func(error)) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sock := zmq4.NewSub(sctx, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(2*time.Second))
	defer sock.Close()
	if err := sock.Dial(endpoint); err != nil {
		return fmt.Errorf("kv events: dial %s: %w", endpoint, err)
	}
	if err := sock.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		return fmt.Errorf("kv events: subscribe %s: %w", endpoint, err)
	}
	if connected != nil {
		connected()
	}
	go func() { // Recv does not watch ctx: closing the socket ends it
		<-sctx.Done()
		_ = sock.Close()
	}()
	for {
		msg, err := sock.Recv()
		if err != nil {
			return fmt.Errorf("kv events: receive from %s: %w", endpoint, err)
		}
		m, err := ParseFrames(msg.Frames)
		if err != nil {
			if bad != nil {
				bad(err)
			}
			continue
		}
		fn(m)
	}
}
