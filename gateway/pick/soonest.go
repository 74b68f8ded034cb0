package pick

// The strategies of Picker.Strategy.
const (
	// StrategySoonest picks the pod where the request's first token would come soonest: the
	// least queued uncached prefill plus this request's own uncached prompt (the greedy
	// oracle's rule); the weighted score breaks ties.
	StrategySoonest = "soonest"
	// StrategyWeighted picks the best weighted score of the scorers (route.Weights).
	StrategyWeighted = "weighted"
)

func (p *Picker) replicas() int {
	if p.Replicas == nil {
		return 1
	}
	return max(p.Replicas(), 1)
}

// othersBacklog estimates the prefill that other gateway replicas have queued on a pod, from the
// engine's own queue metric: the waiting requests it reports beyond this replica's own pending
// ones, each taken as typical tokens (this replica's mean pending prefill there, else this
// request's). With one replica it is 0: this replica's own backlog is then exact, and a scrape,
// older than the backlog, would only add noise.
func othersBacklog(replicas int, srv ServerMetrics, hasSrv bool, ownPending, ownBacklog, typical int) int {
	if replicas <= 1 || !hasSrv || !srv.HasQueue {
		return 0
	}
	others := int(srv.Waiting) - ownPending
	if others <= 0 {
		return 0
	}
	if ownPending > 0 {
		typical = ownBacklog / ownPending
	}
	return others * max(typical, 0)
}

// soonest returns the index of the candidate whose first token would come soonest: the least
// backlog plus uncached prompt tokens. Ties go to the higher weighted score, then the ring's
// order, then the pod name.
func soonest(cands []candidate) int {
	best := 0
	for i := 1; i < len(cands); i++ {
		a, b := cands[i], cands[best]
		ca, cb := a.backlog+a.uncached, b.backlog+b.uncached
		switch {
		case ca < cb:
			best = i
		case ca > cb:
		case better(a, b):
			best = i
		}
	}
	return best
}

// boundYield is how much later, as a ratio of first-token waits (queued plus own uncached prefill,
// in tokens), a request's first token may come on the soonest pod under the load bound than on the
// soonest pod of all before the bound yields to the latter. The bound counts requests, not their
// work: a pod holding many short (cached) prefills and decoding sequences is over it while its
// prefill lane is the emptiest. Where spreading costs the request no more than this, the bound
// holds; where it would cost more, the pod's requests are not the load that delays this one.
// It applies only where this request's uncached prompt on that pod is known (candidate.exact).
const boundYield = 1.25

// soonestBounded is soonest under the load bound, except that a pod over the bound still wins
// when it is the soonest of all and either less of the prompt is left to compute there than on
// the soonest pod under the bound (its cache), or the request's first token would come more than
// boundYield times later on every pod under the bound (its queue). The bound spreads requests
// that the caches and queues do not tell apart; it does not send a request away from the pod
// holding its prefix, or to a much longer queue, where its first token comes later.
// Only a pod known exactly (KV events) holds a prefix: the approximate index remembers what this
// replica sent, which a pod that does not cache, or has evicted it, does not hold, and a pod
// that keeps winning on such a guess takes every request while its queue, counted in the
// tokens the guess leaves uncached, looks empty.
func soonestBounded(cands []candidate) int {
	best := soonest(cands)
	if !cands[best].over {
		return best
	}
	var under []int
	for i, c := range cands {
		if !c.over {
			under = append(under, i)
		}
	}
	if len(under) == 0 { // only exclusions leave none under the bound
		return best
	}
	sub := make([]candidate, len(under))
	for j, i := range under {
		sub[j] = cands[i]
	}
	u := under[soonest(sub)]
	b, c := cands[best], cands[u]
	if b.exact && (b.uncached < c.uncached || float64(c.backlog+c.uncached) > boundYield*float64(b.backlog+b.uncached)) {
		return best
	}
	return u
}
