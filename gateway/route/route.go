// Package route holds the gateway's routing table: which pools serve a model, their routable
// endpoints and their routing policy. A Snapshot is immutable; the Table swaps snapshots
// atomically as the watch (or the static configuration) changes them, so the request path reads
// the table without locks.
package route

import (
	"sort"
	"sync/atomic"
	"time"

	"github.com/neuronetes/neuronetes/gateway/stage"
)

// PoolRef names an AgentPool.
type PoolRef = stage.PoolRef

// Endpoint is a pod that takes requests.
type Endpoint struct {
	// Pod is the pod's name, unique within its pool.
	Pod string
	// Addr is host:port of the model server's HTTP API.
	Addr string
	// MetricsURL is where the model server's Prometheus metrics are scraped ("" for none).
	MetricsURL string
	// KVEvents is the ZeroMQ address ("tcp://host:port") where the model server publishes its
	// KV-cache events, on the pod's own IP ("" for none).
	KVEvents string
}

// KeySource is one place a session key is read from.
type KeySource struct {
	// Header names a request header ("" when Body is set).
	Header string
	// Body names a body field: "conversation_id", "user" or "metadata.<key>".
	Body string
}

// String is "header:<name>" or "body:<field>".
func (k KeySource) String() string {
	if k.Header != "" {
		return "header:" + k.Header
	}
	return "body:" + k.Body
}

// Weights of the pickers' scorers.
type Weights struct {
	Prefill, PrefixCache, Queue, KVCache, InFlight, Hash float64
}

// Priority is a request priority class; larger is more important.
type Priority int

// The priority classes.
const (
	PriorityLow Priority = iota
	PriorityNormal
	PriorityHigh
)

// ParsePriority maps "low", "normal" and "high" to a Priority.
func ParsePriority(s string) (Priority, bool) {
	switch s {
	case "low":
		return PriorityLow, true
	case "normal", "":
		return PriorityNormal, true
	case "high":
		return PriorityHigh, true
	}
	return PriorityNormal, false
}

// String is the class's name.
func (p Priority) String() string {
	switch p {
	case PriorityLow:
		return "low"
	case PriorityHigh:
		return "high"
	}
	return "normal"
}

// Fallback is a pool's cost fallback (AgentPool status.cost.fallback): conversations go to Pool
// instead, all of them or only those not pinned to this pool yet.
type Fallback struct {
	// Pool is the fallback AgentPool, in the same namespace.
	Pool PoolRef
	// AllSessions sends every request; otherwise only new conversations go.
	AllSessions bool
	// Reason is the controller's (BudgetExceeded, CostThreshold).
	Reason string
}

// Policy is the routing configuration of one pool.
type Policy struct {
	// SessionKeys are tried in order; the first non-empty value is the session key.
	SessionKeys []KeySource
	// PinTTL is the lifetime of an unused pin.
	PinTTL time.Duration
	// LoadFactor is ε of bounded-load consistent hashing.
	LoadFactor float64
	// Weights of the scorers.
	Weights Weights
	// MaxInFlightPerEndpoint bounds in-flight requests per ready endpoint before requests queue.
	MaxInFlightPerEndpoint int
	// MaxQueue bounds the queued requests.
	MaxQueue int
	// QueueTimeout bounds a request's wait in the queue.
	QueueTimeout time.Duration
	// Priority of requests to the pool unless the tenant sets an allowed header.
	Priority Priority
	// InputPrice and OutputPrice are US dollars per token.
	InputPrice, OutputPrice float64
}

// DefaultSessionKeys is the session key order of a pool without a RoutingPolicy.
var DefaultSessionKeys = []KeySource{
	{Header: "x-session-id"}, {Header: "x-conversation-id"},
	{Body: "conversation_id"}, {Body: "metadata.conversation_id"}, {Body: "user"},
}

// DefaultPolicy is the policy of a pool without a RoutingPolicy.
func DefaultPolicy() Policy {
	return Policy{
		SessionKeys: DefaultSessionKeys,
		PinTTL:      30 * time.Minute,
		LoadFactor:  0.25,
		Weights:     Weights{Prefill: 4, PrefixCache: 1, Queue: 1, KVCache: 1, InFlight: 1, Hash: 1},
		// vLLM's default max_num_seqs.
		MaxInFlightPerEndpoint: 256,
		MaxQueue:               1024,
		QueueTimeout:           30 * time.Second,
		Priority:               PriorityNormal,
	}
}

// Pool is an AgentPool as the gateway routes to it.
type Pool struct {
	// Ref names the pool.
	Ref PoolRef
	// AgentClass is the pool's AgentClass name (a metrics label).
	AgentClass string
	// Model is the model id clients request.
	Model string
	// Endpoints are the pool's routable pods (serving, ready, not terminating), sorted by Pod.
	Endpoints []Endpoint
	// Policy is the pool's routing policy.
	Policy Policy
	// Fallback, when set, sends the pool's conversations to another pool (cost control).
	Fallback *Fallback
	// Sessions, when set, serves each conversation by an AgentSession of its own (AgentPool
	// spec.sessions) instead of the pool's endpoints.
	Sessions *PoolSessions
}

// PoolSessions is a pool through sessions (AgentPool spec.sessions), as the gateway creates its
// conversations' AgentSessions.
type PoolSessions struct {
	// UID is the AgentPool's UID (the sessions' controlling owner).
	UID string
	// IdleTimeout is each session's idle timeout.
	IdleTimeout time.Duration
	// WorkspaceSizeLimit is each session's workspace limit, a quantity ("" for the default).
	WorkspaceSizeLimit string
	// MaxActive bounds the pool's sessions that hold a pod (the pool's spec.maxReplicas, its
	// default included); zero: unbounded.
	MaxActive int
}

// Endpoint returns the endpoint of pod, if routable.
func (p *Pool) Endpoint(pod string) (Endpoint, bool) {
	i := sort.Search(len(p.Endpoints), func(i int) bool { return p.Endpoints[i].Pod >= pod })
	if i < len(p.Endpoints) && p.Endpoints[i].Pod == pod {
		return p.Endpoints[i], true
	}
	return Endpoint{}, false
}

// Snapshot is one immutable version of the routing table.
type Snapshot struct {
	pools  map[PoolRef]*Pool
	models map[string]map[string][]*Pool // namespace -> model -> pools
	static *Pool
}

// NewSnapshot indexes pools by namespace and model. Endpoints are sorted by pod name; pools of a
// model are in name order.
func NewSnapshot(pools []*Pool) *Snapshot {
	s := &Snapshot{pools: map[PoolRef]*Pool{}, models: map[string]map[string][]*Pool{}}
	for _, p := range pools {
		sort.Slice(p.Endpoints, func(i, j int) bool { return p.Endpoints[i].Pod < p.Endpoints[j].Pod })
		s.pools[p.Ref] = p
		byModel := s.models[p.Ref.Namespace]
		if byModel == nil {
			byModel = map[string][]*Pool{}
			s.models[p.Ref.Namespace] = byModel
		}
		byModel[p.Model] = append(byModel[p.Model], p)
	}
	for _, byModel := range s.models {
		for _, ps := range byModel {
			sort.Slice(ps, func(i, j int) bool { return ps[i].Ref.Name < ps[j].Ref.Name })
		}
	}
	return s
}

// NewStaticSnapshot is the table of static-backends mode: one pool that serves every namespace.
// With a model id, only that model is served; with "", any requested model goes to the pool.
func NewStaticSnapshot(p *Pool) *Snapshot {
	s := NewSnapshot([]*Pool{p})
	s.static = p
	return s
}

// Resolve returns the pools serving model for callers in namespace.
func (s *Snapshot) Resolve(namespace, model string) []*Pool {
	if s.static != nil {
		if s.static.Model == "" || s.static.Model == model {
			return []*Pool{s.static}
		}
		return nil
	}
	return s.models[namespace][model]
}

// Models returns the model ids served in namespace, sorted.
func (s *Snapshot) Models(namespace string) []string {
	if s.static != nil {
		if s.static.Model == "" {
			return []string{s.static.Ref.Name}
		}
		return []string{s.static.Model}
	}
	out := make([]string, 0, len(s.models[namespace]))
	for m := range s.models[namespace] {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// Pool returns a pool by name.
func (s *Snapshot) Pool(ref PoolRef) (*Pool, bool) {
	if s.static != nil {
		return s.static, ref.Name == s.static.Ref.Name
	}
	p, ok := s.pools[ref]
	return p, ok
}

// Pools returns every pool.
func (s *Snapshot) Pools() []*Pool {
	out := make([]*Pool, 0, len(s.pools))
	for _, p := range s.pools {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref.String() < out[j].Ref.String() })
	return out
}

// Table holds the current snapshot.
type Table struct {
	cur atomic.Pointer[Snapshot]
}

// NewTable returns a table holding s (an empty snapshot when nil).
func NewTable(s *Snapshot) *Table {
	t := &Table{}
	if s == nil {
		s = NewSnapshot(nil)
	}
	t.cur.Store(s)
	return t
}

// Load returns the current snapshot.
func (t *Table) Load() *Snapshot { return t.cur.Load() }

// Store replaces the snapshot.
func (t *Table) Store(s *Snapshot) { t.cur.Store(s) }
