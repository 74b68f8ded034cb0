package main

import (
	"container/heap"
	"fmt"
	"time"

	"github.com/neuronetes/neuronetes/demoagent/kvcache"
	"github.com/neuronetes/neuronetes/demoagent/tokenize"
)

// The model replay computes, for the pods each request was actually sent to, the TTFTs the demo
// agent's engine model gives without any CPU contention: the same serial prefill lane, slots, KV
// reservation and prefix cache (demoagent/kvcache), in exact arithmetic. It separates the quality
// of the routing decisions from the scheduling noise of a shared machine.

// prepared is a replayed request tokenized as the agent tokenizes it.
type prepared struct {
	at           time.Duration
	promptTokens int
	output       int
	chain, full  []uint64 // block hashes of the prompt, and of prompt plus answer
}

// prepare tokenizes every request (a chat prompt of one user message, the answer "tok0 ...").
func prepare(reqs []replayRequest, blockSize int) []prepared {
	out := make([]prepared, len(reqs))
	for i, r := range reqs {
		prompt := tokenize.Chat([]tokenize.Message{{Role: "user", Text: r.prompt()}})
		out[i] = prepared{at: r.at, promptTokens: len(prompt), output: r.output,
			chain: kvcache.BlockHashes(prompt, blockSize)}
		out[i].full = kvcache.BlockHashes(append(prompt, tokenize.OutputIDs(r.output)...), blockSize)
	}
	return out
}

// sharedCacheHitRate is the reference hit rate: one demo-agent KV cache with blocks blocks (the
// pods' total) fed every request in arrival order, each finished (prompt and answer cached, blocks
// freed) before the next arrives, so no capacity is held by concurrent requests. Hits are counted
// as the agent counts them (vllm:prefix_cache_hits / vllm:prefix_cache_queries, in tokens).
func sharedCacheHitRate(reqs []prepared, blocks, blockSize int) (float64, error) {
	pool, err := kvcache.New(blocks, blockSize, true)
	if err != nil {
		return 0, err
	}
	for _, r := range reqs {
		a, ok := pool.Allocate(r.chain, r.promptTokens, r.promptTokens+r.output)
		if !ok {
			return 0, fmt.Errorf("a %d-token request does not fit the shared cache of %d blocks", r.promptTokens+r.output, blocks)
		}
		pool.Commit(a, r.chain)
		pool.Commit(a, r.full)
		pool.Free(a)
	}
	st := pool.Stats()
	if st.Queries == 0 {
		return 0, nil
	}
	return float64(st.Hits) / float64(st.Queries), nil
}

// podModel is one pod of the model replay, with the agents' flags (wall-clock rates).
type podModel struct {
	f    agentFlags
	pool *kvcache.Pool

	waiting  []int // request indexes, FIFO
	running  int
	full     bool // the head did not fit in the KV cache; retried when a request finishes
	laneFree time.Duration
	now      time.Duration // the last time settled
	events   eventHeap
	first    map[int]time.Duration // first-token times by request index
}

type event struct {
	at    time.Duration
	req   int
	alloc *kvcache.Alloc
	final bool // the request finishes (else its prefill ends)
}

type eventHeap []event

func (h eventHeap) Len() int           { return len(h) }
func (h eventHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h eventHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)        { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// modelTTFTs returns the modelled TTFT of every request with a known pod (assign[i] >= 0; -1 is
// unknown, e.g. a failed request) in ms, and the modelled hit rate over all pods.
func modelTTFTs(reqs []prepared, assign []int, pods int, f agentFlags) ([]float64, float64, error) {
	models, err := newPodModels(pods, f)
	if err != nil {
		return nil, 0, err
	}
	for i, p := range assign {
		if p >= 0 && p < pods {
			models[p].advance(reqs[i].at, reqs)
			models[p].arrive(i, reqs)
		}
	}
	ttfts, hit := finish(models, reqs)
	return ttfts, hit, nil
}

// oracleTTFTs is the model of a greedy router that knows every pod's exact state: each request
// goes to the pod where its first token would come soonest given the prefill lane's backlog
// and the pod's cache as they stand at its arrival. It is a reference for what routing can
// reach on this workload and these pods, free of any machine noise.
func oracleTTFTs(reqs []prepared, pods int, f agentFlags) ([]float64, float64, error) {
	models, err := newPodModels(pods, f)
	if err != nil {
		return nil, 0, err
	}
	for i, r := range reqs {
		best, bestAt := 0, time.Duration(0)
		for p, m := range models {
			m.advance(r.at, reqs)
			if at := m.estimate(r, reqs); p == 0 || at < bestAt {
				best, bestAt = p, at
			}
		}
		models[best].arrive(i, reqs)
	}
	ttfts, hit := finish(models, reqs)
	return ttfts, hit, nil
}

func newPodModels(pods int, f agentFlags) ([]*podModel, error) {
	out := make([]*podModel, pods)
	for i := range out {
		pool, err := kvcache.New(f.kvTokens/f.blockSize, f.blockSize, true)
		if err != nil {
			return nil, err
		}
		out[i] = &podModel{f: f, pool: pool, first: map[int]time.Duration{}}
	}
	return out, nil
}

// finish runs every pod to the end and returns the TTFTs (ms) and the hit rate over all pods.
func finish(models []*podModel, reqs []prepared) ([]float64, float64) {
	var ttfts []float64
	var hits, queries uint64
	for _, m := range models {
		m.advance(never, reqs)
		for i, at := range m.first {
			ttfts = append(ttfts, ms(at-reqs[i].at))
		}
		st := m.pool.Stats()
		hits, queries = hits+st.Hits, queries+st.Queries
	}
	if queries == 0 {
		return ttfts, 0
	}
	return ttfts, float64(hits) / float64(queries)
}

const never = time.Duration(1<<63 - 1)

// advance plays everything that happens on the pod up to t: prefill ends, finishes, admissions.
func (m *podModel) advance(t time.Duration, reqs []prepared) {
	for {
		u := never
		if m.events.Len() > 0 {
			u = m.events[0].at
		}
		if len(m.waiting) > 0 && m.admissible() {
			u = min(u, max(m.laneFree, m.now))
		}
		if u > t || u == never {
			return
		}
		m.settle(u, reqs)
	}
}

// settle handles the events due at u and admits what can start then.
func (m *podModel) settle(u time.Duration, reqs []prepared) {
	m.now = u
	for m.events.Len() > 0 && m.events[0].at <= u {
		m.handle(heap.Pop(&m.events).(event), reqs)
	}
	for len(m.waiting) > 0 && m.laneFree <= u && m.admissible() {
		m.admit(u, reqs)
	}
}

// arrive queues request i at its arrival time; the pod has been advanced to it.
func (m *podModel) arrive(i int, reqs []prepared) {
	m.waiting = append(m.waiting, i)
	m.settle(max(reqs[i].at, m.now), reqs)
}

// estimate is when r's first token would come on this pod: after the prefill in progress and the
// waiting requests' uncached tokens (as the cache stands now), plus its own.
func (m *podModel) estimate(r prepared, reqs []prepared) time.Duration {
	work := r.promptTokens - m.pool.CachedTokens(r.chain, r.promptTokens)
	for _, w := range m.waiting {
		work += reqs[w].promptTokens - m.pool.CachedTokens(reqs[w].chain, reqs[w].promptTokens)
	}
	return max(m.laneFree, r.at) + m.prefill(work) + m.f.ttftBase
}

// parts splits estimate into tokens: the queued uncached prefill ahead of r (what remains of the
// prefill in progress, and the waiting requests' uncached tokens as the cache stands now) and r's
// own uncached prompt.
func (m *podModel) parts(r prepared, reqs []prepared) (backlog, own int) {
	own = r.promptTokens - m.pool.CachedTokens(r.chain, r.promptTokens)
	for _, w := range m.waiting {
		backlog += reqs[w].promptTokens - m.pool.CachedTokens(reqs[w].chain, reqs[w].promptTokens)
	}
	if m.laneFree > r.at {
		backlog += int((m.laneFree-r.at).Seconds()*m.f.prefillRate + 0.5)
	}
	return backlog, own
}

func (m *podModel) prefill(tokens int) time.Duration {
	return time.Duration(float64(tokens) / m.f.prefillRate * float64(time.Second))
}

// admissible: a slot is free and the last admission did not find the KV cache full.
func (m *podModel) admissible() bool { return m.running < m.f.slots && !m.full }

// admit starts the head's prefill at t, if the KV cache has room; else admission waits for a
// request to finish.
func (m *podModel) admit(t time.Duration, reqs []prepared) {
	i := m.waiting[0]
	r := reqs[i]
	a, ok := m.pool.Allocate(r.chain, r.promptTokens, r.promptTokens+r.output)
	if !ok {
		m.full = true
		return
	}
	m.waiting = m.waiting[1:]
	m.running++
	end := t + m.prefill(r.promptTokens-a.CachedTokens())
	m.laneFree = end
	m.first[i] = end + m.f.ttftBase
	decode := time.Duration(float64(r.output-1) / m.f.decodeRate * float64(time.Second))
	heap.Push(&m.events, event{at: end, req: i, alloc: a})
	heap.Push(&m.events, event{at: m.first[i] + decode, req: i, alloc: a, final: true})
}

func (m *podModel) handle(e event, reqs []prepared) {
	if !e.final {
		m.pool.Commit(e.alloc, reqs[e.req].chain)
		return
	}
	m.pool.Commit(e.alloc, reqs[e.req].full)
	m.pool.Free(e.alloc)
	m.running--
	m.full = false
}

// regret measures a policy's decisions against the oracle's rule in the model: at each request's
// arrival (the model's pods in the state the policy's own earlier decisions left them), was it
// sent to a pod whose estimated first token is later than the soonest pod's?
type regret struct {
	n, worse int // decisions judged, and those later than the soonest pod's by more than 1 ms
	cache    int // of worse: another pod held more of the prompt in its cache
	excess   time.Duration
	diag     viewDiag // why, from the gateway's logged view (when there is one)
}

func (r regret) String() string {
	if r.n == 0 {
		return "no decisions"
	}
	return fmt.Sprintf("%.1f%% later than the soonest pod (%d of %d; %d with more of the prompt cached elsewhere), mean excess %.1f ms",
		100*float64(r.worse)/float64(r.n), r.worse, r.n, r.cache, ms(r.excess)/float64(r.n))
}

// decisionRegret replays assign (as modelTTFTs does) and judges each decision; views (nil, or
// per request what the gateway saw, the replay having started at start) explain the late ones.
func decisionRegret(reqs []prepared, assign []int, pods int, f agentFlags, views []*view, start time.Time) regret {
	models, err := newPodModels(pods, f)
	if err != nil {
		return regret{}
	}
	var g regret
	for i, p := range assign {
		if p < 0 || p >= pods {
			continue
		}
		r := reqs[i]
		bestAt, best, mostCached := time.Duration(0), 0, 0
		var at []time.Duration
		mBacklog, mOwn := make([]int, pods), make([]int, pods)
		for q, m := range models {
			m.advance(r.at, reqs)
			e := m.estimate(r, reqs)
			at = append(at, e)
			if q == 0 || e < bestAt {
				bestAt, best = e, q
			}
			mostCached = max(mostCached, m.pool.CachedTokens(r.chain, r.promptTokens))
			mBacklog[q], mOwn[q] = m.parts(r, reqs)
		}
		g.n++
		worse := at[p] > bestAt+time.Millisecond
		if i < len(views) {
			g.diag.add(views[i], p, best, mBacklog, mOwn, at[p]-bestAt, f, start.Add(r.at))
		}
		if worse {
			g.worse++
			g.excess += at[p] - bestAt
			if mostCached > models[p].pool.CachedTokens(r.chain, r.promptTokens) {
				g.cache++
			}
		}
		models[p].arrive(i, reqs)
	}
	return g
}

// ruleTTFTs is the model of the gateway's soonest-first rule with perfect information: each
// request goes to the pod with the least booked prefill (the uncached prompt tokens, as counted
// when they were placed, of its requests not started yet, plus what remains of the one being
// computed) plus its own uncached prompt, the pods' caches and prefill rates known exactly.
// Compared with the gateway's model replay, it separates what the rule reaches from what this
// machine's timing noise costs the gateway's view of the pods.
func ruleTTFTs(reqs []prepared, pods int, f agentFlags) ([]float64, float64, error) {
	models, err := newPodModels(pods, f)
	if err != nil {
		return nil, 0, err
	}
	type booked struct{ req, tokens int }
	pending := make([][]booked, pods)
	for i, r := range reqs {
		best, bestCost, bestWork := 0, 0, 0
		for p, m := range models {
			m.advance(r.at, reqs)
			keep, backlog := pending[p][:0], 0
			for _, b := range pending[p] {
				if _, started := m.first[b.req]; !started {
					keep = append(keep, b)
					backlog += b.tokens
				}
			}
			pending[p] = keep
			if m.laneFree > r.at {
				backlog += int((m.laneFree - r.at).Seconds() * f.prefillRate)
			}
			work := r.promptTokens - m.pool.CachedTokens(r.chain, r.promptTokens)
			if cost := backlog + work; p == 0 || cost < bestCost {
				best, bestCost, bestWork = p, cost, work
			}
		}
		pending[best] = append(pending[best], booked{i, bestWork})
		models[best].arrive(i, reqs)
	}
	ttfts, hit := finish(models, reqs)
	return ttfts, hit, nil
}
