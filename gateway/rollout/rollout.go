// Package rollout is the gateway's side of AgentRollouts: it splits conversations between a
// stable and a canary AgentPool by a stable hash of the session key (a conversation keeps its
// variant for as long as its assignment lives, shared by every gateway replica through Redis),
// applies the rollout's match rules, mirrors a share of stable requests to the canary as shadow
// traffic, and exports per-variant samples (requests, errors, TTFT, guardrail actions, posted
// quality scores) under the step's id for the controller's metric gate.
//
// The split decision is pure (Variant); the store, the classifier hook and the metrics are the
// effects around it.
package rollout

import (
	"hash/fnv"
	"sort"
	"sync"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// Variant is the side of a rollout a request is on.
type Variant string

// The two variants.
const (
	Stable Variant = "stable"
	Canary Variant = "canary"
)

// buckets is the resolution of weights: 10000 buckets = 0.01%.
const buckets = 10000

// Bucket maps a key to [0, buckets) with FNV-1a over salt, a separator and key.
func Bucket(salt, key string) int {
	h := fnv.New64a()
	_, _ = h.Write([]byte(salt))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(key))
	return int(h.Sum64() % buckets)
}

// View is the gateway's view of one AgentRollout.
type View struct {
	// Namespace and Name of the AgentRollout.
	Namespace, Name string
	// UID salts the hash, so two rollouts split the same sessions independently.
	UID string
	// Stable and Canary are AgentPool names in Namespace.
	Stable, Canary string
	// Phase, Weight (0-100), Mirror (0-100), StepID and Run come from the status.
	Phase          nnv1.RolloutPhase
	Weight, Mirror int32
	StepID         string
	// Run is the rollout's run (status.run): assignments are kept per run, so a pause or an
	// edit that keeps the run keeps every conversation's variant.
	Run int64
	// Drained is status.drained: after a promotion, the stable pool is drained and every
	// request, of every conversation, goes to the canary.
	Drained bool
	// Match selects the participating requests (nil: all).
	Match *Matcher
}

// Key is "namespace/name".
func (v *View) Key() string { return v.Namespace + "/" + v.Name }

// salt is the rollout's UID: the buckets of a session are the same in every run; the store keys
// carry the run, so a new run (new pools, or a retry after a rollback) assigns afresh.
func (v *View) salt() string { return v.UID }

// Active reports whether the rollout splits traffic by weight (Progressing or Paused).
func (v *View) Active() bool {
	return v.Phase == nnv1.RolloutProgressing || v.Phase == nnv1.RolloutPaused
}

// NewVariant is the variant of a new conversation (or of a request without a session key,
// keyed by its request id): everything to stable after a rollback, everything to canary after
// promotion, else the canary when the key's bucket is below the weight and the request takes
// part.
func (v *View) NewVariant(key string, matched bool) Variant {
	switch {
	case v.Phase == nnv1.RolloutRolledBack || v.Phase == "":
		return Stable
	case v.Phase == nnv1.RolloutPromoted:
		return Canary
	case !matched:
		return Stable
	case Bucket(v.salt(), key) < int(v.Weight)*buckets/100:
		return Canary
	}
	return Stable
}

// Mirrored reports whether a stable request is copied to the canary on this step.
func (v *View) Mirrored(requestID string) bool {
	return v.Active() && v.Mirror > 0 && Bucket(v.salt()+"/mirror", requestID) < int(v.Mirror)*buckets/100
}

// Pool returns the pool name of a variant.
func (v *View) Pool(x Variant) string {
	if x == Canary {
		return v.Canary
	}
	return v.Stable
}

// ViewOf converts an AgentRollout; the matcher is built by the caller (it needs a client).
func ViewOf(r *nnv1.AgentRollout, m *Matcher) *View {
	return &View{Namespace: r.Namespace, Name: r.Name, UID: string(r.UID), Stable: r.Spec.StablePool.Name,
		Canary: r.Spec.CanaryPool.Name, Phase: r.Status.Phase, Weight: r.Status.CanaryWeight, Mirror: r.Status.Mirror,
		StepID: r.Status.StepID, Run: r.Status.Run, Drained: r.Status.Drained, Match: m}
}

// Table holds the views, found by the pools they name. A pool named by several rollouts
// belongs to the oldest (by name order within a namespace, deterministic across replicas).
type Table struct {
	mu     sync.RWMutex
	byKey  map[string]*View
	byPool map[string]*View
	// onStep is called when a rollout leaves a step (old step id), to drop its samples.
	onStep func(v *View, oldStep string)
}

// NewTable returns an empty table; onStep may be nil.
func NewTable(onStep func(v *View, oldStep string)) *Table {
	return &Table{byKey: map[string]*View{}, byPool: map[string]*View{}, onStep: onStep}
}

// Upsert adds or replaces a view.
func (t *Table) Upsert(v *View) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.byKey[v.Key()]; ok && old.StepID != v.StepID && old.StepID != "" && t.onStep != nil {
		t.onStep(old, old.StepID)
	}
	t.byKey[v.Key()] = v
	t.reindex()
}

// Delete removes a view.
func (t *Table) Delete(namespace, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.byKey[namespace+"/"+name]; ok && t.onStep != nil && old.StepID != "" {
		t.onStep(old, old.StepID)
	}
	delete(t.byKey, namespace+"/"+name)
	t.reindex()
}

func (t *Table) reindex() {
	keys := make([]string, 0, len(t.byKey))
	for k := range t.byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	t.byPool = map[string]*View{}
	for _, k := range keys {
		v := t.byKey[k]
		for _, p := range []string{v.Stable, v.Canary} {
			if _, taken := t.byPool[v.Namespace+"/"+p]; !taken {
				t.byPool[v.Namespace+"/"+p] = v
			}
		}
	}
}

// ForPool returns the view that names the pool (namespace/name), if any.
func (t *Table) ForPool(namespace, pool string) *View {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.byPool[namespace+"/"+pool]
}

// Get returns the view of a rollout.
func (t *Table) Get(namespace, name string) *View {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.byKey[namespace+"/"+name]
}

// All returns every view.
func (t *Table) All() []*View {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]*View, 0, len(t.byKey))
	for _, v := range t.byKey {
		out = append(out, v)
	}
	return out
}
