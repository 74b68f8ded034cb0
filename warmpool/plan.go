package warmpool

import (
	"sort"
	"time"
)

// Target returns the warm-pool size for a pool: prewarmPercent of maxReplicas, rounded up so a
// small pool with a non-zero percentage keeps at least one warm pod. Out-of-range inputs are
// clamped (percent to [0,100], maxReplicas to >= 0).
func Target(maxReplicas, prewarmPercent int32) int32 {
	if maxReplicas <= 0 || prewarmPercent <= 0 {
		return 0
	}
	if prewarmPercent > 100 {
		prewarmPercent = 100
	}
	return int32((int64(maxReplicas)*int64(prewarmPercent) + 99) / 100)
}

// Pod is what the planner needs to know about one existing pool pod.
type Pod struct {
	// Name identifies the pod in the plan.
	Name string
	// State is the pod's label state.
	State State
	// Ready is the pod's Ready condition.
	Ready bool
	// Terminating is true once deletion started; such pods are ignored by the counts.
	Terminating bool
	// Created is the creation time; the planner prefers old pods to keep and new pods to remove.
	Created time.Time
}

// Input is one planning round.
type Input struct {
	// Desired serving pods (already clamped to the pool's bounds).
	Desired int32
	// WarmTarget is the warm-pool size (see Target).
	WarmTarget int32
	// UseWarmPool lets scale-up activate warm pods before creating new ones.
	UseWarmPool bool
	// Delay after LastActivation before the warm pool is replenished.
	Delay time.Duration
	// BatchSize bounds how many warm pods are being started at once while replenishing (>= 1).
	BatchSize int32
	// LastActivation is when warm pods were last activated; zero if never. Until the first
	// activation the warm pool is filled at once, without delay or batching.
	LastActivation time.Time
	// Now is the planning time.
	Now time.Time
	// Pods are the pool's existing pods.
	Pods []Pod
}

// Plan is the set of actions for one round. Invariant: after applying it, the non-terminating
// pods number at most Desired + WarmTarget.
type Plan struct {
	// Activate lists warm pods to flip to serving, best first (Ready, then oldest).
	Activate []string
	// CreateServing is how many pods to create directly as serving (cold starts).
	CreateServing int32
	// CreateWarm is how many warm pods to create.
	CreateWarm int32
	// Drain lists serving pods to drain and delete.
	Drain []string
	// Trim lists excess warm pods to delete.
	Trim []string
	// RequeueAfter, when non-zero, is when the planner wants another round (replenish delay).
	RequeueAfter time.Duration
}

// Changed reports whether the plan has any action.
func (p Plan) Changed() bool {
	return len(p.Activate) > 0 || p.CreateServing > 0 || p.CreateWarm > 0 || len(p.Drain) > 0 || len(p.Trim) > 0
}

// keepOrder sorts pods so the ones worth keeping come first: Ready before not Ready, then oldest,
// then by name for determinism.
func keepOrder(pods []Pod) {
	sort.SliceStable(pods, func(i, j int) bool {
		a, b := pods[i], pods[j]
		if a.Ready != b.Ready {
			return a.Ready
		}
		if !a.Created.Equal(b.Created) {
			return a.Created.Before(b.Created)
		}
		return a.Name < b.Name
	})
}

func names(pods []Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

// Decide plans one round. It is deterministic for a given input.
func Decide(in Input) Plan {
	var serving, warm []Pod
	for _, p := range in.Pods {
		if p.Terminating {
			continue
		}
		switch p.State {
		case Serving:
			serving = append(serving, p)
		case Warm:
			warm = append(warm, p)
		}
	}
	keepOrder(serving)
	keepOrder(warm)
	desired := max(in.Desired, 0)
	warmTarget := max(in.WarmTarget, 0)
	if !in.UseWarmPool {
		warmTarget = 0
	}
	var plan Plan

	// Serving side.
	switch have := int32(len(serving)); {
	case have < desired:
		need := desired - have
		if in.UseWarmPool {
			n := min(need, int32(len(warm)))
			plan.Activate = names(warm[:n])
			warm = warm[n:]
			need -= n
		}
		plan.CreateServing = need
	case have > desired:
		plan.Drain = names(serving[desired:])
	}

	// Warm side.
	haveWarm := int32(len(warm))
	switch {
	case haveWarm > warmTarget:
		plan.Trim = names(warm[warmTarget:])
	case haveWarm < warmTarget:
		deficit := warmTarget - haveWarm
		last := in.LastActivation
		if len(plan.Activate) > 0 {
			last = in.Now
		}
		if last.IsZero() {
			plan.CreateWarm = deficit
			break
		}
		if wait := last.Add(in.Delay).Sub(in.Now); wait > 0 {
			plan.RequeueAfter = wait
			break
		}
		var starting int32
		for _, p := range warm {
			if !p.Ready {
				starting++
			}
		}
		batch := max(in.BatchSize, 1)
		plan.CreateWarm = max(min(deficit, batch-starting), 0)
	}
	return plan
}
