package quota

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"
)

// Peer defaults.
const (
	// PeerHeartbeat is how often a replica announces itself.
	PeerHeartbeat = 2 * time.Second
	// PeerTTL is how long an announcement counts: a replica that stopped is forgotten after it.
	PeerTTL = 10 * time.Second
)

// Peers counts the gateway replicas sharing one Redis: each announces itself every
// PeerHeartbeat in a sorted set (member: a random id, score: its clock in ms) and counts the
// members announced within PeerTTL. Replicas whose clocks differ by less than PeerTTL minus
// PeerHeartbeat count each other. Admission divides each pool's capacity by the count (Share),
// so the pods' bound holds across replicas. While Redis is unreachable the last count stands.
type Peers struct {
	// Client and Prefix locate the set (<prefix>replicas); nil Client: one replica.
	Client redis.UniversalClient
	Prefix string
	// Now is the clock (default time.Now).
	Now func() time.Time

	id    string
	count atomic.Int64
}

var peersScript = redis.NewScript(`
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2] - ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[3] * 2)
return redis.call('ZCARD', KEYS[1])`)

// Count is the number of replicas (at least 1).
func (p *Peers) Count() int {
	if p == nil {
		return 1
	}
	return max(int(p.count.Load()), 1)
}

// Beat announces this replica once and refreshes the count.
func (p *Peers) Beat(ctx context.Context) error {
	if p == nil || p.Client == nil {
		return nil
	}
	if p.id == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		p.id = hex.EncodeToString(b[:])
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	n, err := peersScript.Run(ctx, p.Client, []string{p.Prefix + "replicas"}, p.id,
		strconv.FormatInt(now().UnixMilli(), 10), PeerTTL.Milliseconds()).Int64()
	if err != nil {
		return err
	}
	p.count.Store(n)
	return nil
}

// Leave removes this replica's announcement (shutdown), so the others count it out at once.
func (p *Peers) Leave(ctx context.Context) {
	if p != nil && p.Client != nil && p.id != "" {
		_ = p.Client.ZRem(ctx, p.Prefix+"replicas", p.id).Err()
	}
}

// Run beats every PeerHeartbeat until ctx ends, then leaves.
func (p *Peers) Run(ctx context.Context) {
	if p == nil || p.Client == nil {
		return
	}
	t := time.NewTicker(PeerHeartbeat)
	defer t.Stop()
	for {
		if err := p.Beat(ctx); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).V(1).Info("Replica heartbeat failed; keeping the last count", "replicas", p.Count(), "err", err)
		}
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			p.Leave(lctx)
			cancel()
			return
		case <-t.C:
		}
	}
}

// Share is one replica's part of capacity among replicas: rounded down so that the parts never
// add up to more than the whole, and at least 1 so that every replica can serve (with fewer
// slots than replicas the pool may then take up to replicas requests).
func Share(capacity, replicas int) int {
	if replicas <= 1 || capacity <= 0 {
		return capacity
	}
	return max(int(math.Floor(float64(capacity)/float64(replicas))), 1)
}
