package pick

import (
	"strings"
	"sync"

	"github.com/neuronetes/neuronetes/gateway/affinity"
	"github.com/neuronetes/neuronetes/gateway/kvindex"
	"github.com/neuronetes/neuronetes/gateway/route"
)

// ringWalk is how many ring positions the hash scorer ranks; pods further away score 0.
const ringWalk = 8

// prefillFloor keeps the prefill scorer's ratio finite for idle pods and makes differences of a
// few tokens, below any model server's block size, count for little.
const prefillFloor = 64

// Picker scores a pool's endpoints.
type Picker struct {
	// Load is this replica's in-flight tracker (required).
	Load *Load
	// Metrics are the scraped model-server metrics (nil: the queue and KV scorers are off).
	Metrics *Scraper
	// Prefix is the approximate prefix index (nil: the prefix scorer is off).
	Prefix *PrefixIndex
	// KV is the exact index of the pods that publish KV events (nil: none is exact). A pod it
	// knows exactly is matched there; the others fall back to Prefix.
	KV *kvindex.Index
	// Strategy is StrategySoonest ("" means it) or StrategyWeighted.
	Strategy string
	// Replicas is the number of gateway replicas sharing the pods (nil: 1).
	Replicas func() int

	mu    sync.Mutex
	rings map[route.PoolRef]*affinity.Ring
}

// Input describes the request being placed.
type Input struct {
	// RingKey positions the request on the consistent-hash ring: the session key. Without one
	// ("") the hash scorer is off and ties go to the pod names' order.
	RingKey string
	// Blocks are the prompt's prefix blocks (PrefixIndex.Blocks).
	Blocks []uint64
	// PromptTokens is the prompt's estimated length in tokens.
	PromptTokens int
	// Exclude lists pods that must not be chosen (a failed first attempt).
	Exclude map[string]bool
	// KV is the prompt as the engine tokenizes it, for the exact index (nil: none). When set,
	// PromptTokens is its length.
	KV *kvindex.Prompt
	// Explain asks Pick to fill Choice.Considered (a log of the decision; costs an allocation).
	Explain bool
}

// Choice is a picked endpoint and the prompt tokens it likely has to prefill (not in its cache
// by the prefix index).
type Choice struct {
	route.Endpoint
	Uncached int
	// Considered is every non-excluded endpoint as Pick saw it, when Input.Explain was set.
	Considered []Considered
}

// Considered is one endpoint as Pick saw it: its queued uncached prefill and this request's
// uncached prompt there (tokens), its learnt prefill rate (tokens per second, 0 unknown), and
// whether the load bound ruled it out.
type Considered struct {
	Pod               string
	Backlog, Uncached int
	Rate              float64
	OverBound         bool
}

// uncached estimates the prompt tokens pod must prefill, given matched leading blocks of
// blocks: the prompt's share beyond the matched blocks.
func uncached(in Input, matched int) int {
	if len(in.Blocks) == 0 || matched <= 0 {
		return in.PromptTokens
	}
	return in.PromptTokens * (len(in.Blocks) - min(matched, len(in.Blocks))) / len(in.Blocks)
}

// Uncached estimates the prompt tokens ep would have to prefill for in: exactly when ep
// publishes KV events, else from the approximate index.
func (p *Picker) Uncached(in Input, ep route.Endpoint) int {
	if u, ok := p.exactUncached(in, ep); ok {
		return u
	}
	if p.Prefix == nil || len(in.Blocks) == 0 || p.Metrics.NoPrefixCaching(ep.MetricsURL) {
		return in.PromptTokens
	}
	return uncached(in, p.Prefix.Match(in.Blocks)[ep.Pod])
}

// exactUncached is the prompt tokens ep must prefill by the exact index: the prompt less its
// cached leading blocks, of which the engine recomputes the last when the whole prompt is cached
// (it needs the last token's logits). False when ep is not exact.
func (p *Picker) exactUncached(in Input, ep route.Endpoint) (int, bool) {
	if p.KV == nil || in.KV == nil {
		return 0, false
	}
	n, bs, ok := p.KV.Match(ep.KVEvents, in.KV)
	if !ok {
		return 0, false
	}
	total := in.KV.Tokens()
	cached := min(n*bs, max(total-1, 0)/bs*bs)
	return total - cached, true
}

// ring returns the pool's ring, rebuilt when its endpoints changed.
func (p *Picker) ring(pool *route.Pool) *affinity.Ring {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rings == nil {
		p.rings = map[route.PoolRef]*affinity.Ring{}
	}
	r := p.rings[pool.Ref]
	if r != nil && sameNames(r.Names(), pool.Endpoints) {
		return r
	}
	names := make([]string, len(pool.Endpoints))
	for i, e := range pool.Endpoints {
		names[i] = e.Pod
	}
	r = affinity.NewRing(names)
	p.rings[pool.Ref] = r
	return r
}

func sameNames(names []string, eps []route.Endpoint) bool {
	if len(names) != len(eps) {
		return false
	}
	for i := range names {
		if names[i] != eps[i].Pod {
			return false
		}
	}
	return true
}

// UnderBound reports whether pod may take one more request under the pool's bounded-load limit.
func (p *Picker) UnderBound(pool *route.Pool, pod string) bool {
	n := len(pool.Endpoints)
	reqs, _, _ := p.Load.Pod(pool.Ref, pod)
	return reqs+1 <= affinity.LoadBound(p.Load.Pool(pool.Ref), n, pool.Policy.LoadFactor)
}

// candidate is one endpoint being scored.
type candidate struct {
	ep           route.Endpoint
	reqs, tokens int
	// backlog is the pod's pending prefill (Load.Backlog, plus other replicas' estimate);
	// uncached is this request's own uncached prompt there.
	backlog, uncached int
	rank              int // position in the ring walk, -1 when not reached
	prefix            int
	srv               ServerMetrics
	hasSrv            bool
	score             float64
	exact             bool    // uncached is known: from the exact index, or all of it on a pod that does not cache
	over              bool    // one more request would put it over the load bound
	rate              float64 // the prefill rate backlog was computed at (0: unknown)
}

// Pick returns the best endpoint of pool for in, or false when every endpoint is excluded.
func (p *Picker) Pick(pool *route.Pool, in Input) (Choice, bool) {
	all, bound := p.candidates(pool, in)
	if len(all) == 0 {
		return Choice{}, false
	}
	var cands []candidate
	var best int
	if p.Strategy == StrategyWeighted {
		cands = underBound(all)
		p.score(pool.Policy.Weights, cands, len(in.Blocks), bound)
		for i := 1; i < len(cands); i++ {
			if better(cands[i], cands[best]) {
				best = i
			}
		}
	} else {
		cands = all
		p.score(pool.Policy.Weights, cands, len(in.Blocks), bound)
		best = soonestBounded(cands)
	}
	ch := Choice{Endpoint: cands[best].ep, Uncached: cands[best].uncached}
	if in.Explain {
		ch.Considered = make([]Considered, len(all))
		for i, c := range all {
			ch.Considered[i] = Considered{Pod: c.ep.Pod, Backlog: c.backlog, Uncached: c.uncached,
				Rate: c.rate, OverBound: c.over}
		}
	}
	return ch, true
}

// underBound returns the candidates under the load bound, or all of them when the bound leaves
// none (only exclusions can cause that).
func underBound(all []candidate) []candidate {
	under := make([]candidate, 0, len(all))
	for _, c := range all {
		if !c.over {
			under = append(under, c)
		}
	}
	if len(under) == 0 {
		return all
	}
	return under
}

func better(a, b candidate) bool {
	const eps = 1e-9
	if a.score > b.score+eps {
		return true
	}
	if a.score < b.score-eps {
		return false
	}
	// Ties: the ring's order, then the name.
	switch {
	case a.rank >= 0 && (b.rank < 0 || a.rank < b.rank):
		return true
	case b.rank >= 0 && (a.rank < 0 || b.rank < a.rank):
		return false
	}
	return strings.Compare(a.ep.Pod, b.ep.Pod) < 0
}

// candidates are the non-excluded endpoints, those over the load bound marked.
func (p *Picker) candidates(pool *route.Pool, in Input) ([]candidate, int) {
	n := 0
	for _, e := range pool.Endpoints {
		if !in.Exclude[e.Pod] {
			n++
		}
	}
	if n == 0 {
		return nil, 0
	}
	bound := affinity.LoadBound(p.Load.Pool(pool.Ref), len(pool.Endpoints), pool.Policy.LoadFactor)
	rank := map[string]int{}
	if in.RingKey != "" && pool.Policy.Weights.Hash > 0 {
		ring := p.ring(pool)
		for i, idx := range ring.Walk(in.RingKey, ringWalk) {
			rank[ring.Names()[idx]] = i
		}
	}
	var matched map[string]int
	if p.Prefix != nil && len(in.Blocks) > 0 {
		matched = p.Prefix.Match(in.Blocks)
	}
	all := make([]candidate, 0, n)
	for _, e := range pool.Endpoints {
		if in.Exclude[e.Pod] {
			continue
		}
		reqs, tokens, _ := p.Load.Pod(pool.Ref, e.Pod)
		srv, hasSrv, noCache := p.Metrics.Lookup(e.MetricsURL)
		if noCache {
			// What the approximate index remembers sending the pod is not in its cache.
			delete(matched, e.Pod)
		}
		backlog, rate := p.Load.BacklogAt(pool.Ref, e.Pod, srv.PrefillRate()) // the engine's rate when it reports one
		if hasSrv && srv.HasQueue {
			// The engine's own queue: its waiting requests are this replica's newest pending ones
			// (and other replicas', othersBacklog below).
			backlog = max(backlog, p.Load.QueuedFloor(pool.Ref, e.Pod, int(srv.Waiting)))
		}
		c := candidate{ep: e, reqs: reqs, tokens: tokens, backlog: backlog, rank: -1, prefix: matched[e.Pod],
			uncached: uncached(in, matched[e.Pod]), srv: srv, hasSrv: hasSrv, rate: rate, exact: noCache}
		if u, ok := p.exactUncached(in, e); ok {
			c.uncached, c.exact = u, true
			if len(in.Blocks) > 0 && in.PromptTokens > 0 { // the prefix scorer's share, in its blocks
				c.prefix = len(in.Blocks) * (in.PromptTokens - u) / in.PromptTokens
			}
		}
		if r, ok := rank[e.Pod]; ok {
			c.rank = r
		}
		c.backlog += othersBacklog(p.replicas(), c.srv, c.hasSrv, p.Load.Pending(pool.Ref, e.Pod), backlog, c.uncached)
		c.over = reqs+1 > bound
		all = append(all, c)
	}
	return all, bound
}

// score fills every candidate's weighted score; each scorer gives [0,1].
// The in-flight scorer rates requests against the load bound and tokens against the busiest
// candidate.
func (p *Picker) score(w route.Weights, cands []candidate, blocks, bound int) {
	maxTok, maxQ := 0, 0.0
	for _, c := range cands {
		maxTok = max(maxTok, c.tokens)
		if c.hasSrv && c.srv.HasQueue {
			maxQ = max(maxQ, c.srv.Waiting+0.5*c.srv.Running)
		}
	}
	queue := make([]float64, len(cands))
	kv := make([]float64, len(cands))
	qKnown, kvKnown := known(cands, func(c candidate) (float64, bool) {
		if !c.hasSrv || !c.srv.HasQueue {
			return 0, false
		}
		return 1 - ratio(c.srv.Waiting+0.5*c.srv.Running, maxQ), true
	}, queue), known(cands, func(c candidate) (float64, bool) {
		if !c.hasSrv || !c.srv.HasKV {
			return 0, false
		}
		return 1 - min(max(c.srv.KVUsage, 0), 1), true
	}, kv)
	minCost := -1
	for _, c := range cands {
		if cost := c.backlog + c.uncached; minCost < 0 || cost < minCost {
			minCost = cost
		}
	}
	for i := range cands {
		c := &cands[i]
		s := 0.0
		if w.Prefill > 0 {
			// The estimated prefill ahead of this request's first token on the pod, relative to the
			// best pod's: 1 for the best, smaller as the backlog grows.
			s += w.Prefill * float64(minCost+prefillFloor) / float64(c.backlog+c.uncached+prefillFloor)
		}
		if w.InFlight > 0 {
			s += w.InFlight * (0.5*(1-min(ratio(float64(c.reqs), float64(bound)), 1)) + 0.5*(1-ratio(float64(c.tokens), float64(maxTok))))
		}
		if w.Queue > 0 && qKnown {
			s += w.Queue * queue[i]
		}
		if w.KVCache > 0 && kvKnown {
			s += w.KVCache * kv[i]
		}
		if w.PrefixCache > 0 && blocks > 0 {
			s += w.PrefixCache * float64(c.prefix) / float64(blocks)
		}
		if w.Hash > 0 && c.rank >= 0 {
			s += w.Hash * (1 - float64(c.rank)/ringWalk)
		}
		c.score = s
	}
}

// known fills out[i] with f's score for candidates that have one and the mean of those for the
// others (an unknown pod is neither preferred nor avoided); false when none has one.
func known(cands []candidate, f func(candidate) (float64, bool), out []float64) bool {
	sum, n := 0.0, 0
	has := make([]bool, len(cands))
	for i, c := range cands {
		if v, ok := f(c); ok {
			out[i], has[i] = v, true
			sum += v
			n++
		}
	}
	if n == 0 {
		return false
	}
	for i := range out {
		if !has[i] {
			out[i] = sum / float64(n)
		}
	}
	return true
}

func ratio(v, maxV float64) float64 {
	if maxV <= 0 {
		return 0
	}
	return v / maxV
}
