package binding

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/dispatcher/dedupe"
	"github.com/neuronetes/neuronetes/dispatcher/queue"
	"github.com/neuronetes/neuronetes/dispatcher/worker"
)

// SubjectChecker is implemented by providers whose destinations must exist before results can
// be published idempotently (natsq: a JetStream stream must capture the subject).
type SubjectChecker interface {
	CheckSubject(ctx context.Context, url, subject string) error
}

// Deps are what the running consumers share.
type Deps struct {
	// Providers by CRD name (nats, kafka, redis).
	Providers map[string]queue.Provider
	// Store holds the dedupe records.
	Store dedupe.Store
	// Caller calls the gateway.
	Caller worker.Caller
	// Member names this replica.
	Member string
	// Observer returns the metrics observer of a binding (optional).
	Observer func(s Spec) worker.Observer
	// ReadyReplicas returns the ready replicas of a pool.
	ReadyReplicas func(ns, pool string) int
	// Peers returns the number of live dispatcher replicas (>= 1).
	Peers func() int
	// RetryEvery is the wait before reconnecting a failed consumer (default 5s).
	RetryEvery time.Duration
}

// Manager runs one consumer per dispatched binding.
type Manager struct {
	Deps

	mu      sync.Mutex
	running map[types.NamespacedName]*run
	health  map[types.NamespacedName]Health
}

type run struct {
	spec       Spec
	stop, kill context.CancelFunc
	done       chan struct{}
	runner     *worker.Runner
}

// Health is this replica's view of one binding.
type Health struct {
	// State is consuming, error or stopped.
	State string `json:"state"`
	// Reason and Message explain an error (condition reason and message).
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// InFlight messages of this replica.
	InFlight int64 `json:"inFlight"`
	// Summary describes what is served, for the Ready message.
	Summary string `json:"summary,omitempty"`
	// ReadyReason is the Ready condition's reason when served (default Consuming).
	ReadyReason string `json:"readyReason,omitempty"`
}

// Health states.
const (
	StateConsuming = "consuming"
	StateError     = "error"
)

// NewManager returns a manager.
func NewManager(d Deps) *Manager {
	if d.RetryEvery <= 0 {
		d.RetryEvery = 5 * time.Second
	}
	return &Manager{Deps: d, running: map[types.NamespacedName]*run{}, health: map[types.NamespacedName]Health{}}
}

// SetError records that key cannot be consumed (the status loop reports it) and stops its
// consumer.
func (m *Manager) SetError(ctx context.Context, key types.NamespacedName, reason, msg string) {
	m.Remove(ctx, key, 0)
	m.mu.Lock()
	m.health[key] = Health{State: StateError, Reason: reason, Message: msg}
	m.mu.Unlock()
}

// Forget drops key entirely (the binding is gone or no longer dispatched).
func (m *Manager) Forget(ctx context.Context, key types.NamespacedName, drain time.Duration) {
	m.Remove(ctx, key, drain)
	m.mu.Lock()
	delete(m.health, key)
	m.mu.Unlock()
}

// Health returns this replica's health of every binding it knows.
func (m *Manager) Health() map[types.NamespacedName]Health {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[types.NamespacedName]Health, len(m.health))
	for k, h := range m.health {
		if r := m.running[k]; r != nil {
			h.InFlight = r.runner.InFlight()
		}
		out[k] = h
	}
	return out
}

// Specs returns the running specs.
func (m *Manager) Specs() map[types.NamespacedName]Spec {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[types.NamespacedName]Spec, len(m.running))
	for k, r := range m.running {
		out[k] = r.spec
	}
	return out
}

// Apply starts the consumer of s, or restarts it when its spec changed.
func (m *Manager) Apply(ctx context.Context, s Spec) {
	m.mu.Lock()
	if r := m.running[s.Key]; r != nil && reflect.DeepEqual(r.spec, s) {
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	m.Remove(ctx, s.Key, 5*time.Second)
	stopCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	workCtx, kill := context.WithCancel(context.WithoutCancel(ctx))
	r := &run{spec: s, stop: stop, kill: kill, done: make(chan struct{})}
	p := m.Providers[s.Provider]
	var obs worker.Observer
	if m.Observer != nil {
		obs = m.Observer(s)
	}
	w := &worker.Worker{Config: s.Worker, Member: m.Member, Store: m.Store, Caller: m.Caller, Observer: obs}
	r.runner = &worker.Runner{Worker: w, Limit: func() int { return m.limit(s) }}
	m.mu.Lock()
	m.running[s.Key] = r
	m.health[s.Key] = Health{State: StateError, Reason: "Connecting", Message: "connecting to the queue", Summary: summary(s)}
	m.mu.Unlock()
	go m.loop(stopCtx, workCtx, r, p)
}

// Remove stops key's consumer: no new fetches, drain for the messages in flight, then they are
// abandoned to the broker.
func (m *Manager) Remove(_ context.Context, key types.NamespacedName, drain time.Duration) {
	m.mu.Lock()
	r := m.running[key]
	delete(m.running, key)
	m.mu.Unlock()
	if r == nil {
		return
	}
	r.stop()
	select {
	case <-r.done:
	case <-time.After(drain):
		r.kill()
		<-r.done
	}
	r.kill()
}

// StopAll removes every consumer (shutdown).
func (m *Manager) StopAll(ctx context.Context, drain time.Duration) {
	var wg sync.WaitGroup
	for k := range m.Specs() {
		wg.Add(1)
		go func() { defer wg.Done(); m.Remove(ctx, k, drain) }()
	}
	wg.Wait()
}

// limit is this replica's share of prefetch x ready pool replicas (at least 1 while the pool
// has a ready replica, 0 otherwise).
func (m *Manager) limit(s Spec) int {
	ready := 1
	if m.ReadyReplicas != nil {
		ready = m.ReadyReplicas(s.Key.Namespace, s.Pool)
	}
	if ready <= 0 {
		return 0
	}
	peers := 1
	if m.Peers != nil {
		peers = max(m.Peers(), 1)
	}
	return max((s.Prefetch*ready+peers-1)/peers, 1)
}

func (m *Manager) setHealth(key types.NamespacedName, h Health) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.running[key]; ok {
		m.health[key] = h
	}
}

// loop connects and consumes until stopped, reconnecting after failures.
func (m *Manager) loop(stopCtx, workCtx context.Context, r *run, p queue.Provider) {
	defer close(r.done)
	s := r.spec
	log := klog.FromContext(workCtx).WithValues("toolbinding", s.Key, "provider", s.Provider, "queue", s.Queue)
	workCtx = klog.NewContext(workCtx, log)
	for stopCtx.Err() == nil {
		err := m.consume(stopCtx, workCtx, r, p)
		if stopCtx.Err() != nil {
			return
		}
		reason := "ProviderUnavailable"
		var fe *FieldError
		if errors.As(err, &fe) {
			reason = fe.Reason
		}
		log.Info("Consumer failed; retrying", "err", err, "in", m.RetryEvery)
		m.setHealth(s.Key, Health{State: StateError, Reason: reason, Message: err.Error(), Summary: summary(s)})
		select {
		case <-stopCtx.Done():
		case <-time.After(m.RetryEvery):
		}
	}
}

func (m *Manager) consume(stopCtx, workCtx context.Context, r *run, p queue.Provider) error {
	s := r.spec
	if p == nil {
		return &FieldError{Field: "spec.queueConfig.provider", Reason: "ProviderNotSupported", Msg: fmt.Sprintf("provider %q is not served by this dispatcher", s.Provider)}
	}
	cctx, cancel := context.WithTimeout(stopCtx, 30*time.Second)
	defer cancel()
	if sc, ok := p.(SubjectChecker); ok {
		for field, subj := range map[string]string{"responseQueue": s.Worker.ResponseQueue, "deadLetterQueue": s.Worker.DeadLetterQueue} {
			if err := sc.CheckSubject(cctx, s.URL, subj); err != nil {
				return &FieldError{Field: "spec.queueConfig.dispatch." + field, Reason: "DestinationInvalid", Msg: err.Error()}
			}
		}
	}
	pub, err := p.Publisher(cctx, s.URL)
	if err != nil {
		return fmt.Errorf("publisher: %w", err)
	}
	c, err := p.Consumer(cctx, queue.Options{URL: s.URL, Queue: s.Queue, Group: s.Group, Member: m.Member, AckWait: s.AckWait()})
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	defer c.Close()
	r.runner.Consumer = c
	r.runner.Worker.Publisher = pub
	var mu sync.Mutex
	var lastErr error
	r.runner.OnError = func(err error) {
		mu.Lock()
		lastErr = err
		mu.Unlock()
		if err == nil {
			m.setHealth(s.Key, Health{State: StateConsuming, Summary: summary(s)})
			return
		}
		m.setHealth(s.Key, Health{State: StateError, Reason: "ProviderUnavailable", Message: "fetch: " + err.Error(), Summary: summary(s)})
	}
	m.setHealth(s.Key, Health{State: StateConsuming, Summary: summary(s)})
	err = r.runner.Run(stopCtx, workCtx)
	mu.Lock()
	defer mu.Unlock()
	if err == nil && stopCtx.Err() == nil {
		err = lastErr
	}
	if err == nil && stopCtx.Err() == nil {
		err = errors.New("consumer stopped")
	}
	return err
}

func summary(s Spec) string {
	return fmt.Sprintf("%s queue %q (group %s) to AgentPool %s as model %s; results to %q, dead letters to %q",
		s.Provider, s.Queue, s.Group, s.Pool, s.Worker.Model, s.Worker.ResponseQueue, s.Worker.DeadLetterQueue)
}
