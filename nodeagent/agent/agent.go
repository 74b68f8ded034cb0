// Package agent is the node agent's core: it turns "make model X warm" requests into a verified cache
// entry (package cache) that is resident in the page cache (package warm), tracks each model's state on
// this node, keeps the memory budget, and feeds metrics. It has no Kubernetes dependencies; the
// reconciler in this package and the node API drive it.
package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/nodeagent/cache"
	"github.com/neuronetes/neuronetes/nodeagent/warm"
)

// Phase is the state of one model's weights on this node. The names match the Model CRD's
// ModelCachePhase.
type Phase string

// Phases of a model on this node.
const (
	PhasePending     Phase = "Pending"
	PhaseDownloading Phase = "Downloading"
	PhaseVerifying   Phase = "Verifying"
	PhaseReady       Phase = "Ready"
	PhaseFailed      Phase = "Failed"
)

// Config configures an Agent.
type Config struct {
	// Store is the weights cache.
	Store *cache.Store
	// Warm tunes page-cache warming.
	Warm warm.Options
	// Locker, when set, mlocks warmed entries within its budget.
	Locker *warm.Locker
	// MemoryBudget is the most bytes of cached entries kept in the page cache; 0 means unlimited.
	// Least recently used unpinned entries are dropped first.
	MemoryBudget int64
	// WarmFraction is the resident fraction from which an entry counts as warm; 0 means 0.9.
	WarmFraction float64
	// Metrics is optional.
	Metrics *Metrics
	// Sources is the admin's source policy applied to every request, whoever made it (a Model,
	// the node API): its FileRoots, Egress, HTTPClient and StallTimeout replace the request's.
	Sources cache.SourceOptions
}

// Request asks for a model's weights to be cached and warm.
type Request struct {
	// Digest is "sha256:<hex>".
	Digest string
	// URI is the source; may be empty if the entry is already cached.
	URI string
	// SizeBytes is the expected size, 0 if unknown.
	SizeBytes int64
	// Source carries credentials and endpoints for URI; the agent's Config.Sources policy
	// fields replace its own.
	Source cache.SourceOptions
	// NoEvict forbids evicting other entries to make room (opportunistic prewarm).
	NoEvict bool
	// Urgent marks a fetch for a pod bound to this node: it does not queue behind prewarm.
	Urgent bool

	explicit bool // set by EnsureWarm: a caller asked, so finding the entry cached is a cache hit
}

// State is what the agent knows about one entry.
type State struct {
	// Hex is the sha256 of the weights.
	Hex string `json:"hex"`
	// Phase on this node.
	Phase Phase `json:"phase"`
	// Path of the cached file when Ready.
	Path string `json:"path,omitempty"`
	// SizeBytes of the content (Total while downloading, -1 if unknown).
	SizeBytes int64 `json:"sizeBytes"`
	// BytesCached so far.
	BytesCached int64 `json:"bytesCached"`
	// BytesPerSecond while downloading.
	BytesPerSecond float64 `json:"bytesPerSecond,omitempty"`
	// ETA while downloading.
	ETA time.Duration `json:"eta,omitempty"`
	// ResidentBytes in the page cache (mincore) at the last refresh.
	ResidentBytes int64 `json:"residentBytes"`
	// Warm is true when ResidentBytes reaches the warm fraction of SizeBytes.
	Warm bool `json:"warm"`
	// Pinned is true while a pod on this node uses the entry.
	Pinned bool `json:"pinned"`
	// Message explains a failure or describes progress.
	Message string `json:"message,omitempty"`
	// FailedAt is when the last attempt failed.
	FailedAt time.Time `json:"failedAt,omitzero"`
	// FailedURI is the source of the last failed attempt; a request naming
	// another source is not held back by the retry delay.
	FailedURI string `json:"failedURI,omitempty"`
	// Failures counts consecutive failed attempts; the retry delay doubles
	// with each. Zero once the entry is Ready.
	Failures int `json:"failures,omitempty"`
	// WarmDuration is how long the last page-cache warm-up took.
	WarmDuration time.Duration `json:"warmDuration,omitempty"`
}

// Agent tracks models on this node. All methods are safe for concurrent use.
type Agent struct {
	cfg  Config
	base context.Context

	mu      sync.Mutex
	states  map[string]*State        // hex -> last known state
	seen    map[string]bool          // every hex this process has tracked; owns their node labels
	running map[string]chan struct{} // hex -> closed when the background ensure ends
}

// New returns an Agent whose background work runs under ctx.
func New(ctx context.Context, cfg Config) *Agent {
	if cfg.WarmFraction <= 0 {
		cfg.WarmFraction = 0.9
	}
	return &Agent{cfg: cfg, base: ctx, states: map[string]*State{}, seen: map[string]bool{}, running: map[string]chan struct{}{}}
}

// Store returns the agent's cache.
func (a *Agent) Store() *cache.Store { return a.cfg.Store }

// EnsureWarm caches and warms the entry for req and returns its state. It waits for a background
// ensure of the same digest instead of starting a second one.
func (a *Agent) EnsureWarm(ctx context.Context, req Request) (State, error) {
	h, err := cache.ParseDigest(req.Digest)
	if err != nil {
		return State{}, err
	}
	req.explicit = true
	done := a.Start(req)
	select {
	case <-done:
	case <-ctx.Done():
		return a.State(h), ctx.Err()
	}
	st := a.State(h)
	if st.Phase == PhaseFailed {
		return st, errors.New(st.Message)
	}
	return st, nil
}

// Start launches a background ensure for req unless one is running, and returns a channel closed when
// it ends. An entry that is already cached and warm finishes at once.
func (a *Agent) Start(req Request) <-chan struct{} {
	h, err := cache.ParseDigest(req.Digest)
	if err != nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if ch, ok := a.running[h]; ok {
		return ch
	}
	ch := make(chan struct{})
	a.running[h] = ch
	if a.states[h] == nil || a.states[h].Phase == PhaseFailed {
		a.states[h] = &State{Hex: h, Phase: PhasePending, SizeBytes: req.SizeBytes}
		a.seen[h] = true
	}
	go func() {
		defer func() {
			a.mu.Lock()
			delete(a.running, h)
			a.mu.Unlock()
			close(ch)
		}()
		a.ensure(a.base, h, req)
	}()
	return ch
}

// Running reports whether any background ensure is in progress.
func (a *Agent) Running() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.running) > 0
}

// sourceOptions is o (credentials, endpoint) under the agent's source policy.
func (a *Agent) sourceOptions(o cache.SourceOptions) cache.SourceOptions {
	p := a.cfg.Sources
	o.FileRoots, o.Egress, o.HTTPClient, o.StallTimeout = p.FileRoots, p.Egress, p.HTTPClient, p.StallTimeout
	o.S3Transport = p.S3Transport
	return o
}

func (a *Agent) ensure(ctx context.Context, h string, req Request) {
	log := klog.FromContext(ctx).WithValues("digest", h)
	ctx = klog.NewContext(ctx, log)
	// Keeping an already Ready entry warm (resync) is not a request; an explicit ask is.
	hit := req.explicit || a.State(h).Phase != PhaseReady
	entry, ok := a.cfg.Store.Lookup(h)
	if ok && hit && a.cfg.Metrics != nil {
		a.cfg.Metrics.Hit(h)
	}
	if !ok {
		if req.URI == "" {
			a.fail(h, req.URI, fmt.Errorf("entry %s is not cached and no source uri was given", h))
			return
		}
		src, err := cache.NewSource(req.URI, a.sourceOptions(req.Source))
		if err != nil {
			a.fail(h, req.URI, err)
			return
		}
		a.update(h, func(s *State) { s.Phase = PhaseDownloading; s.Message = "" })
		entry, err = a.cfg.Store.Ensure(ctx, cache.Request{Digest: req.Digest, Source: src, Size: req.SizeBytes, NoEvict: req.NoEvict, Urgent: req.Urgent})
		if err != nil {
			a.fail(h, req.URI, err)
			return
		}
	}
	a.update(h, func(s *State) {
		s.Phase = PhaseVerifying // verified; now warming the page cache
		s.Path, s.SizeBytes, s.BytesCached = entry.Path, entry.Size, entry.Size
		s.Message = "warming page cache"
	})
	if a.cfg.MemoryBudget > 0 && !a.cfg.Store.Pinned(h) {
		// Opportunistic warm-ups must not push pinned entries out: only warm what fits.
		if resident := a.residentTotal(); resident+entry.Size > a.cfg.MemoryBudget {
			a.refreshOne(h)
			a.update(h, func(s *State) {
				s.Phase = PhaseReady
				s.Failures = 0
				s.Message = "cached; not warmed: memory budget full"
			})
			return
		}
	}
	res, err := warm.Warm(ctx, entry.Path, a.cfg.Warm)
	if err != nil {
		a.fail(h, req.URI, err)
		return
	}
	if a.cfg.Metrics != nil {
		a.cfg.Metrics.PrewarmDuration.Observe(res.Duration.Seconds())
	}
	if a.cfg.Locker != nil {
		if err := a.cfg.Locker.Lock(entry.Path); err != nil {
			log.Info("Not locking entry in memory", "err", err)
		}
	}
	log.Info("Entry warm", "size", entry.Size, "method", res.Method, "duration", res.Duration,
		"bytesPerSecond", int64(float64(entry.Size)/max(res.Duration.Seconds(), 1e-9)))
	a.refreshOne(h)
	a.update(h, func(s *State) { s.Phase = PhaseReady; s.Failures = 0; s.Message = ""; s.WarmDuration = res.Duration })
}

func (a *Agent) fail(h, uri string, err error) {
	a.update(h, func(s *State) {
		s.Phase, s.Message, s.FailedAt, s.FailedURI = PhaseFailed, err.Error(), time.Now(), uri
		s.Failures++
	})
	klog.FromContext(a.base).Error(err, "Ensure failed", "digest", h)
}

func (a *Agent) update(h string, f func(*State)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.states[h]
	if s == nil {
		s = &State{Hex: h}
		a.states[h] = s
	}
	a.seen[h] = true
	f(s)
}

// Known returns every digest hex this agent has tracked since it started (including evicted ones), so
// that their warm labels can be removed when they are no longer warm.
func (a *Agent) Known() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.seen))
	for h := range a.seen {
		out = append(out, h)
	}
	return out
}

// State returns the state of hex, merged with live download progress.
func (a *Agent) State(h string) State {
	prog := map[string]cache.Progress{}
	for _, p := range a.cfg.Store.Progress() {
		prog[p.Hex] = p
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stateLocked(h, prog)
}

func (a *Agent) stateLocked(h string, prog map[string]cache.Progress) State {
	s := State{Hex: h, Phase: PhasePending}
	if p := a.states[h]; p != nil {
		s = *p
	}
	if p, ok := prog[h]; ok && s.Phase == PhaseDownloading {
		s.BytesCached, s.SizeBytes, s.BytesPerSecond, s.ETA = p.Done, p.Total, p.BytesPerSecond, p.ETA
	}
	s.Pinned = a.cfg.Store.Pinned(h)
	return s
}

// States returns every known state: entries in the cache and models requested this run.
func (a *Agent) States() []State {
	prog := map[string]cache.Progress{}
	for _, p := range a.cfg.Store.Progress() {
		prog[p.Hex] = p
	}
	entries := a.cfg.Store.Entries()
	a.mu.Lock()
	defer a.mu.Unlock()
	seen := map[string]bool{}
	var out []State
	for _, e := range entries {
		a.seen[e.Hex] = true
		if a.states[e.Hex] == nil {
			a.states[e.Hex] = &State{Hex: e.Hex, Phase: PhaseReady, Path: e.Path, SizeBytes: e.Size, BytesCached: e.Size}
		}
		seen[e.Hex] = true
		out = append(out, a.stateLocked(e.Hex, prog))
	}
	for h, s := range a.states {
		if seen[h] {
			continue
		}
		if s.Phase == PhaseReady { // evicted since
			delete(a.states, h)
			continue
		}
		out = append(out, a.stateLocked(h, prog))
	}
	return out
}
