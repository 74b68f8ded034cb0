package rollout

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/stage"
)

// ShadowMarker is set to "true" in the metadata of every shadow copy, so an agent that runs
// tools itself can refuse side effects; the gateway discards the copy's response, so no tool
// call it holds reaches anyone.
const ShadowMarker = "neuronetes_shadow"

// Splitter implements the gateway's VariantSelector, Mirror and Observer for every rollout in
// its Table.
type Splitter struct {
	Table    *Table
	Store    Store
	Recorder *Recorder
	// StoreTimeout bounds one store call (default 100ms); on failure the hash decides alone.
	StoreTimeout time.Duration
	// Fallback selects among candidates no rollout names (default stage.DefaultSelector).
	Fallback stage.VariantSelector

	inflight sync.Map // request id -> *decision
}

// decision is what Select decided for a request, kept until Observe.
type decision struct {
	view    *View
	variant Variant
	matched bool
	step    string
}

// Select implements stage.VariantSelector.
func (s *Splitter) Select(ctx context.Context, req *stage.Request) (stage.PoolRef, error) {
	v, stable, canary := s.viewFor(req)
	if v == nil {
		return s.fallback().Select(ctx, req)
	}
	d := &decision{view: v, step: v.StepID}
	d.variant, d.matched = s.decide(ctx, v, req)
	s.inflight.Store(req.ID, d)
	if d.variant == Canary {
		return canary, nil
	}
	return stable, nil
}

func (s *Splitter) fallback() stage.VariantSelector {
	if s.Fallback != nil {
		return s.Fallback
	}
	return stage.DefaultSelector{}
}

// viewFor finds the rollout naming a candidate pool; it needs both pools among the candidates.
func (s *Splitter) viewFor(req *stage.Request) (*View, stage.PoolRef, stage.PoolRef) {
	for _, c := range req.Candidates {
		v := s.Table.ForPool(c.Pool.Namespace, c.Pool.Name)
		if v == nil {
			continue
		}
		var stable, canary stage.PoolRef
		var hasS, hasC bool
		for _, c2 := range req.Candidates {
			if c2.Pool.Namespace != v.Namespace {
				continue
			}
			switch c2.Pool.Name {
			case v.Stable:
				stable, hasS = c2.Pool, true
			case v.Canary:
				canary, hasC = c2.Pool, true
			}
		}
		if hasS && hasC {
			return v, stable, canary
		}
	}
	return nil, stage.PoolRef{}, stage.PoolRef{}
}

// decide returns the variant: a rollback sends everything to stable and a drained promotion
// everything to the canary; otherwise a stored assignment wins, else the hash of the session
// key (or of the request id without one).
func (s *Splitter) decide(ctx context.Context, v *View, req *stage.Request) (Variant, bool) {
	if v.Phase == "" || v.Phase == "RolledBack" {
		return Stable, false
	}
	if v.Phase == nnv1.RolloutPromoted && v.Drained {
		return Canary, true
	}
	if req.SessionKey == "" {
		m := v.Match.Matches(ctx, req.Tenant, req.Header, req.Body.PromptText)
		return v.NewVariant(req.ID, m), m
	}
	key := assignmentKey(v, req.SessionKey)
	sctx, cancel := context.WithTimeout(ctx, s.storeTimeout())
	defer cancel()
	got, ok, err := s.Store.Get(sctx, key)
	if err == nil && ok && (got == Stable || got == Canary) {
		return got, true
	}
	m := v.Match.Matches(ctx, req.Tenant, req.Header, req.Body.PromptText)
	want := v.NewVariant(req.SessionKey, m)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Rollout store unavailable; the hash decides", "rollout", v.Key(), "err", err)
		return want, m
	}
	stored, err := s.Store.Assign(sctx, key, want)
	if err != nil {
		return want, m
	}
	return stored, m
}

func (s *Splitter) storeTimeout() time.Duration {
	if s.StoreTimeout > 0 {
		return s.StoreTimeout
	}
	return 100 * time.Millisecond
}

// Shadows implements stage.Mirror: a stable request of a participating conversation is copied
// to the canary when its request id falls in the step's mirror share.
func (s *Splitter) Shadows(_ context.Context, req *stage.Request) []stage.Shadow {
	x, ok := s.inflight.Load(req.ID)
	if !ok {
		return nil
	}
	d := x.(*decision)
	v := d.view
	if d.variant != Stable || !d.matched || !v.Mirrored(req.ID) {
		return nil
	}
	// The copy is the client's body byte for byte but for the marker spliced into metadata: a
	// tool conversation reaches the canary as it reached the stable pool.
	body := req.Body.Clone()
	_ = body.SetMetadata(ShadowMarker, "true") // metadata was decoded by Parse: it is an object or absent
	step := d.step
	return []stage.Shadow{{Pool: stage.PoolRef{Namespace: v.Namespace, Name: v.Canary}, Body: body,
		Done: func(o stage.Outcome) {
			s.Recorder.Observe(v, step, Sample{Variant: Canary, Mode: ModeShadow, Error: failed(o), TTFT: o.TTFT.Seconds(),
				Safety: len(o.Flags) > 0 || o.Blocked != ""})
			if o.ToolCalls > 0 && s.Recorder != nil {
				s.Recorder.ShadowToolCalls.WithLabelValues(v.Namespace, v.Name).Add(float64(o.ToolCalls))
			}
		}}}
}

// Observe implements stage.Observer.
func (s *Splitter) Observe(req *stage.Request, out stage.Outcome) {
	var d *decision
	if x, ok := s.inflight.LoadAndDelete(req.ID); ok {
		d = x.(*decision)
	} else if d = s.attribute(req); d == nil {
		return
	}
	if !d.matched && d.variant == Stable && d.view.Active() {
		return // not taking part: not a sample of the comparison
	}
	safety := len(out.Flags) > 0 || out.Blocked != ""
	s.Recorder.Observe(d.view, d.step, Sample{Variant: d.variant, Mode: ModeLive, Error: failed(out), TTFT: out.TTFT.Seconds(), Safety: safety})
}

// attribute places a request that never reached Select (a guardrail blocked it) on the variant
// it would have had, without store calls (Observe must not block): a blocked prompt still counts
// against the variant whose guardrail policy blocked it.
func (s *Splitter) attribute(req *stage.Request) *decision {
	v, _, _ := s.viewFor(req)
	if v == nil || v.Phase == "" || v.Phase == "RolledBack" {
		return nil
	}
	key := req.SessionKey
	if key == "" {
		key = req.ID
	}
	m := v.Match.MatchesStatic(req.Tenant, req.Header)
	return &decision{view: v, variant: v.NewVariant(key, m), matched: m, step: v.StepID}
}

// failed is the gate's notion of an error: a 5xx, or a stream that broke after it started.
func failed(o stage.Outcome) bool {
	return !o.Cancelled && (o.Status >= 500 || o.Err != "" && o.Status < 400)
}
