package binding

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/dispatcher/dedupe"
	"github.com/neuronetes/neuronetes/dispatcher/worker"
)

// DeadLetterWindow is how long dead letters keep a binding Degraded.
const DeadLetterWindow = 5 * time.Minute

// Reporter shares this replica's health through Redis, counts live replicas, and writes each
// binding's conditions and counters (every replica computes the same status from the same
// shared data, so their writes agree).
type Reporter struct {
	// Client writes ToolBinding status (nil: status is not written, e.g. static mode).
	Client client.Client
	// Redis shares health and liveness; Prefix scopes the keys.
	Redis  redis.UniversalClient
	Prefix string
	// Member names this replica.
	Member string
	// Manager supplies the queue bindings' health.
	Manager *Manager
	// Tools supplies the tool bindings' health (optional).
	Tools func() map[types.NamespacedName]Health
	// Store has the shared counters.
	Store dedupe.Store
	// Lag reads a binding's queue lag (optional); Gauges receives lag and in-flight (optional).
	Lag    func(ctx context.Context, s Spec) (int64, error)
	Gauges func(s Spec, lag int64, inFlight int64)
	// Period of the loop (default 5s); a replica silent for 3 periods is dead.
	Period time.Duration

	peers   atomic.Int64
	mu      sync.Mutex
	history map[types.NamespacedName][]sample
}

type sample struct {
	at   time.Time
	dead int64
}

type healthEntry struct {
	Health
	At int64 `json:"at"`
}

func (r *Reporter) period() time.Duration {
	if r.Period <= 0 {
		return 5 * time.Second
	}
	return r.Period
}

// Peers is the number of live dispatcher replicas (at least 1).
func (r *Reporter) Peers() int { return int(max(r.peers.Load(), 1)) }

// Run reports until ctx ends.
func (r *Reporter) Run(ctx context.Context) {
	t := time.NewTicker(r.period())
	defer t.Stop()
	for {
		r.Tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Tick runs one round: heartbeat, health exchange, status and gauges.
func (r *Reporter) Tick(ctx context.Context) {
	log := klog.FromContext(ctx)
	now := time.Now()
	stale := 3 * r.period()
	if r.Redis != nil {
		k := r.Prefix + "peers"
		p := r.Redis.TxPipeline()
		p.ZAdd(ctx, k, redis.Z{Score: float64(now.Add(stale).UnixMilli()), Member: r.Member})
		p.ZRemRangeByScore(ctx, k, "-inf", strconv.FormatInt(now.UnixMilli(), 10))
		n := p.ZCard(ctx, k)
		if _, err := p.Exec(ctx); err != nil {
			log.V(1).Info("Peer heartbeat failed", "err", err)
		} else {
			r.peers.Store(n.Val())
		}
	}
	all := r.Manager.Health()
	if r.Tools != nil {
		for k, h := range r.Tools() {
			all[k] = h
		}
	}
	specs := r.Manager.Specs()
	for key, h := range all {
		replicas := r.exchange(ctx, key, h, now, stale)
		s, isQueue := specs[key]
		if isQueue && r.Gauges != nil {
			lag := int64(-1)
			if r.Lag != nil {
				if n, err := r.Lag(ctx, s); err == nil {
					lag = n
				}
			}
			r.Gauges(s, lag, h.InFlight)
		}
		if err := r.writeStatus(ctx, key, replicas, s, isQueue, now); err != nil {
			log.V(1).Info("ToolBinding status not written", "toolbinding", key, "err", err)
		}
	}
}

// exchange publishes this replica's health of key and returns every live replica's.
func (r *Reporter) exchange(ctx context.Context, key types.NamespacedName, h Health, now time.Time, stale time.Duration) []ReplicaHealth {
	own := []ReplicaHealth{{Member: r.Member, Health: h}}
	if r.Redis == nil {
		return own
	}
	hk := r.Prefix + "health:{" + key.String() + "}"
	b, _ := json.Marshal(healthEntry{Health: h, At: now.UnixMilli()})
	p := r.Redis.TxPipeline()
	p.HSet(ctx, hk, r.Member, b)
	p.PExpire(ctx, hk, 2*stale)
	all := p.HGetAll(ctx, hk)
	if _, err := p.Exec(ctx); err != nil {
		return own
	}
	var out []ReplicaHealth
	for member, raw := range all.Val() {
		var e healthEntry
		if json.Unmarshal([]byte(raw), &e) != nil || now.Sub(time.UnixMilli(e.At)) > stale {
			r.Redis.HDel(ctx, hk, member)
			continue
		}
		out = append(out, ReplicaHealth{Member: member, Health: e.Health})
	}
	return out
}

// recentDead is the number of dead letters within DeadLetterWindow, from the counter's history.
func (r *Reporter) recentDead(key types.NamespacedName, total int64, now time.Time) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.history == nil {
		r.history = map[types.NamespacedName][]sample{}
	}
	h := append(r.history[key], sample{now, total})
	for len(h) > 1 && now.Sub(h[1].at) >= DeadLetterWindow {
		h = h[1:]
	}
	r.history[key] = h
	if now.Sub(h[0].at) < DeadLetterWindow && len(h) == 1 {
		return 0 // first sight: older dead letters are not recent
	}
	return total - h[0].dead
}

func (r *Reporter) writeStatus(ctx context.Context, key types.NamespacedName, replicas []ReplicaHealth, s Spec, isQueue bool, now time.Time) error {
	if r.Client == nil {
		return nil
	}
	var b v1alpha1.ToolBinding
	if err := r.Client.Get(ctx, key, &b); err != nil {
		return client.IgnoreNotFound(err)
	}
	orig := b.DeepCopy()
	v := View{Replicas: replicas, PoolReady: -1}
	if isQueue {
		v.Pool, v.DeadLetterQueue, v.Window = s.Pool, s.Worker.DeadLetterQueue, DeadLetterWindow.String()
		if r.Manager.ReadyReplicas != nil {
			v.PoolReady = r.Manager.ReadyReplicas(key.Namespace, s.Pool)
		}
		c, err := r.Store.Counters(ctx, s.Worker.Binding)
		if err == nil {
			v.RecentDeadLetters = r.recentDead(key, c[worker.EventDeadLettered], now)
			b.Status.Dispatch = &v1alpha1.DispatchStatus{Received: c[worker.EventReceived], Succeeded: c[worker.EventSucceeded],
				Retried: c[worker.EventRetried], DeadLettered: c[worker.EventDeadLettered], Duplicates: c[worker.EventDuplicate]}
			for _, rh := range replicas {
				b.Status.Dispatch.InFlight += rh.InFlight
			}
		}
	}
	ready, degraded := Conditions(b.Generation, v)
	meta.SetStatusCondition(&b.Status.Conditions, ready)
	meta.SetStatusCondition(&b.Status.Conditions, degraded)
	if equality.Semantic.DeepEqual(orig.Status, b.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, &b, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("patch status: %w", err)
	}
	return nil
}
