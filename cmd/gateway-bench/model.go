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
	events   eventHeap
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
	perPod := make([][]int, pods)
	for i, p := range assign {
		if p >= 0 && p < pods {
			perPod[p] = append(perPod[p], i)
		}
	}
	var ttfts []float64
	var hits, queries uint64
	for _, idx := range perPod {
		pool, err := kvcache.New(f.kvTokens/f.blockSize, f.blockSize, true)
		if err != nil {
			return nil, 0, err
		}
		m := &podModel{f: f, pool: pool}
		first := m.run(reqs, idx)
		for _, i := range idx {
			ttfts = append(ttfts, ms(first[i]-reqs[i].at))
		}
		st := pool.Stats()
		hits, queries = hits+st.Hits, queries+st.Queries
	}
	if queries == 0 {
		return ttfts, 0, nil
	}
	return ttfts, float64(hits) / float64(queries), nil
}

// run plays the pod's requests (indexes in arrival order) and returns their first-token times.
func (m *podModel) run(reqs []prepared, idx []int) map[int]time.Duration {
	const never = time.Duration(1<<63 - 1)
	first := map[int]time.Duration{}
	next := 0
	for {
		// The earliest of: an event, an arrival, the lane freeing for an admissible request.
		t := never
		if m.events.Len() > 0 {
			t = m.events[0].at
		}
		if next < len(idx) {
			t = min(t, reqs[idx[next]].at)
		}
		if len(m.waiting) > 0 && m.admissible() {
			t = min(t, m.laneFree)
		}
		if t == never {
			return first // done, or the head can never fit (the agent would have rejected it)
		}
		for m.events.Len() > 0 && m.events[0].at <= t {
			m.handle(heap.Pop(&m.events).(event), reqs)
		}
		for next < len(idx) && reqs[idx[next]].at <= t {
			m.waiting = append(m.waiting, idx[next])
			next++
		}
		for len(m.waiting) > 0 && m.laneFree <= t && m.admissible() {
			m.admit(t, reqs, first)
		}
	}
}

// admissible: a slot is free and the last admission did not find the KV cache full.
func (m *podModel) admissible() bool { return m.running < m.f.slots && !m.full }

// admit starts the head's prefill at t, if the KV cache has room; else admission waits for a
// request to finish.
func (m *podModel) admit(t time.Duration, reqs []prepared, first map[int]time.Duration) {
	i := m.waiting[0]
	r := reqs[i]
	a, ok := m.pool.Allocate(r.chain, r.promptTokens, r.promptTokens+r.output)
	if !ok {
		m.full = true
		return
	}
	m.waiting = m.waiting[1:]
	m.running++
	work := r.promptTokens - a.CachedTokens()
	end := t + time.Duration(float64(work)/m.f.prefillRate*float64(time.Second))
	m.laneFree = end
	first[i] = end + m.f.ttftBase
	decode := time.Duration(float64(r.output-1) / m.f.decodeRate * float64(time.Second))
	heap.Push(&m.events, event{at: end, req: i, alloc: a})
	heap.Push(&m.events, event{at: first[i] + decode, req: i, alloc: a, final: true})
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
