package main

import (
	"container/heap"
	"encoding/json"
	"fmt"
	"time"

	"github.com/neuronetes/neuronetes/gateway/kvevents"
	"github.com/neuronetes/neuronetes/gateway/kvindex"
	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/pick"
	"github.com/neuronetes/neuronetes/gateway/route"
)

// The picker replay runs the gateway's own picker (gateway/pick: the Picker, its Load tracker
// and the exact KV index) inside the model, on the model's clock: each request is placed by
// Picker.Pick at its trace time, its lease is acquired as the gateway acquires it, its first
// token and its end reach the lease at the model's times, and every pod's cache events reach the
// index as they happen. Nothing runs on the wall clock, so it is deterministic: it measures what
// the picker's rule and its estimates cost against the greedy oracle, without this machine's
// timing noise (the wall-clock replay measures both).

// indexFeed applies one model pod's cache events to the index, as the gateway's subscriber does.
type indexFeed struct {
	x         *kvindex.Index
	key       string
	seq       uint64
	blockSize int
}

func (o *indexFeed) apply(e kvevents.Event) {
	o.seq++
	o.x.Apply(o.key, kvevents.Message{Seq: o.seq, Batch: kvevents.Batch{Events: []kvevents.Event{e}, DPRank: -1}})
}

func intHashes(hs []uint64) []kvevents.Hash {
	out := make([]kvevents.Hash, len(hs))
	for i, h := range hs {
		out[i] = kvevents.IntHash(h)
	}
	return out
}

func (o *indexFeed) Stored(hs []uint64, _ uint64, _ bool) {
	o.apply(kvevents.Event{Kind: kvevents.TagBlockStored, Hashes: intHashes(hs), BlockSize: o.blockSize})
}
func (o *indexFeed) Removed(hs []uint64) {
	o.apply(kvevents.Event{Kind: kvevents.TagBlockRemoved, Hashes: intHashes(hs)})
}
func (o *indexFeed) Cleared() { o.apply(kvevents.Event{Kind: kvevents.TagAllBlocksCleared}) }

// leaseEvent is a lease's first token (release false) or end, at a model time.
type leaseEvent struct {
	at      time.Duration
	lease   *pick.Lease
	release bool
}

type leaseHeap []leaseEvent

func (h leaseHeap) Len() int { return len(h) }
func (h leaseHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return !h[i].release && h[j].release
}
func (h leaseHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *leaseHeap) Push(x any)   { *h = append(*h, x.(leaseEvent)) }
func (h *leaseHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// kvPrompts tokenizes every request as the gateway does for its exact index.
func kvPrompts(reqs []replayRequest) ([]*kvindex.Prompt, error) {
	out := make([]*kvindex.Prompt, len(reqs))
	for i, r := range reqs {
		content, err := json.Marshal(r.prompt())
		if err != nil {
			return nil, err
		}
		out[i] = kvindex.DemoPrompt(&openai.Request{Route: openai.RouteChat,
			Messages: []openai.Message{{Role: "user", Content: content}}})
	}
	return out, nil
}

// pickerTTFTs places every request with the gateway's picker in the model (the gateway's
// defaults, with policy's load factor) and returns the modelled TTFTs (ms), hit rate and the
// assignment with what the picker saw of each decision (a view, decided at base plus its trace
// time).
func pickerTTFTs(reqs []prepared, prompts []*kvindex.Prompt, pods int, f agentFlags, policy route.Policy, base time.Time) (*routingStats, error) {
	models, err := newPodModels(pods, f)
	if err != nil {
		return nil, err
	}
	clock := base
	now := func() time.Time { return clock }
	load := pick.NewLoad()
	load.Now = now
	scraper := &pick.Scraper{Now: now}
	p := &pick.Picker{Load: load, Metrics: scraper, KV: &kvindex.Index{}}
	pool := &route.Pool{Ref: route.PoolRef{Namespace: "bench", Name: "model"}, Policy: policy}
	for i, m := range models {
		ep := route.Endpoint{Pod: fmt.Sprintf("pod-%d", i), MetricsURL: fmt.Sprintf("metrics-%d", i), KVEvents: fmt.Sprintf("kv-%d", i)}
		pool.Endpoints = append(pool.Endpoints, ep)
		p.KV.Connected(ep.KVEvents)
		m.pool.SetObserver(&indexFeed{x: p.KV, key: ep.KVEvents, blockSize: f.blockSize})
	}
	leases := make([]*pick.Lease, len(reqs))
	waiting := make([][]int, pods) // assigned requests not admitted yet, per pod
	var events leaseHeap
	st := &routingStats{assign: make([]int, len(reqs)), views: make([]*view, len(reqs)), start: base}
	for i, r := range reqs {
		for q, m := range models {
			m.advance(r.at, reqs)
			keep := waiting[q][:0]
			for _, j := range waiting[q] {
				first, ok := m.first[j]
				if !ok {
					keep = append(keep, j)
					continue
				}
				end := first + time.Duration(float64(reqs[j].output-1)/f.decodeRate*float64(time.Second))
				heap.Push(&events, leaseEvent{at: first, lease: leases[j]})
				heap.Push(&events, leaseEvent{at: end, lease: leases[j], release: true})
			}
			waiting[q] = keep
		}
		for events.Len() > 0 && events[0].at <= r.at {
			e := heap.Pop(&events).(leaseEvent)
			clock = base.Add(e.at)
			if e.release {
				e.lease.Release()
			} else {
				e.lease.FirstToken()
			}
		}
		clock = base.Add(r.at)
		for _, ep := range pool.Endpoints { // the engine's prefill counters, freshly scraped
			scraper.Set(ep.MetricsURL, pick.ServerMetrics{HasPrefill: true, PromptTokens: f.prefillRate * 1000,
				PrefillSeconds: 1000, At: clock})
		}
		ch, ok := p.Pick(pool, pick.Input{PromptTokens: prompts[i].Tokens(), KV: prompts[i], Explain: true})
		if !ok {
			return nil, fmt.Errorf("request %d: no pod picked", i)
		}
		v := &view{at: clock, cands: map[int]pick.Considered{}}
		q := 0
		for j, ep := range pool.Endpoints {
			if ep.Pod == ch.Pod {
				q = j
			}
			for _, c := range ch.Considered {
				if c.Pod == ep.Pod {
					v.cands[j] = c
				}
			}
		}
		st.assign[i], st.views[i] = q, v
		leases[i] = load.Acquire(pool.Ref, ch.Pod, r.promptTokens+r.output, ch.Uncached)
		models[q].arrive(i, reqs)
		waiting[q] = append(waiting[q], i)
	}
	st.modelTTFTs, st.modelHitRate = finish(models, reqs)
	return st, nil
}

// leastTTFTs is least-request in the model: each request goes to the pod with the fewest
// requests in flight (waiting or running), the lowest index on ties.
func leastTTFTs(reqs []prepared, pods int, f agentFlags) ([]float64, float64, error) {
	models, err := newPodModels(pods, f)
	if err != nil {
		return nil, 0, err
	}
	for i, r := range reqs {
		best := 0
		for p, m := range models {
			m.advance(r.at, reqs)
			if p > 0 && m.running+len(m.waiting) < models[best].running+len(models[best].waiting) {
				best = p
			}
		}
		models[best].arrive(i, reqs)
	}
	ttfts, hit := finish(models, reqs)
	return ttfts, hit, nil
}
