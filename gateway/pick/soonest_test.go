package pick

import (
	"fmt"
	"testing"

	"github.com/neuronetes/neuronetes/gateway/kvevents"
	"github.com/neuronetes/neuronetes/gateway/kvindex"
	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/route"
)

// TestSoonest is the decision table of the soonest-first rule.
func TestSoonest(t *testing.T) {
	c := func(pod string, backlog, uncached int, score float64, rank int) candidate {
		return candidate{ep: route.Endpoint{Pod: pod}, backlog: backlog, uncached: uncached, score: score, rank: rank}
	}
	cases := []struct {
		name  string
		cands []candidate
		want  string
	}{
		{"the least queued plus own prefill wins over a better score",
			[]candidate{c("a", 500, 1000, 9, 0), c("b", 0, 1000, 1, 1)}, "b"},
		{"a cache hit behind a short queue beats an idle pod",
			[]candidate{c("idle", 0, 1000, 5, 0), c("cached", 200, 100, 1, 1)}, "cached"},
		{"a cache hit behind a long queue loses to an idle pod",
			[]candidate{c("idle", 0, 1000, 1, 1), c("cached", 5000, 100, 5, 0)}, "idle"},
		{"equal cost: the higher weighted score", []candidate{c("a", 10, 90, 1, -1), c("b", 50, 50, 2, -1)}, "b"},
		{"equal cost and score: the ring's order", []candidate{c("a", 0, 100, 1, 3), c("b", 0, 100, 1, 0)}, "b"},
		{"equal cost, score, no ring: the name", []candidate{c("b", 0, 100, 1, -1), c("a", 0, 100, 1, -1)}, "a"},
		{"one candidate", []candidate{c("only", 9, 9, 0, -1)}, "only"},
	}
	for _, tc := range cases {
		if got := tc.cands[soonest(tc.cands)].ep.Pod; got != tc.want {
			t.Errorf("%s: picked %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestSoonestBounded is the decision table of the load bound under the soonest-first rule: the
// bound holds unless the pod over it is the soonest of all because of its cache.
func TestSoonestBounded(t *testing.T) {
	c := func(pod string, backlog, uncached int, over bool) candidate {
		return candidate{ep: route.Endpoint{Pod: pod}, backlog: backlog, uncached: uncached, over: over, rank: -1, exact: true}
	}
	guess := func(cd candidate) candidate { cd.exact = false; return cd }
	cases := []struct {
		name  string
		cands []candidate
		want  string
	}{
		{"the soonest is under the bound", []candidate{c("a", 0, 100, false), c("b", 0, 900, true)}, "a"},
		{"over the bound but soonest by its cache", []candidate{c("cached", 300, 100, true), c("idle", 0, 1000, false)}, "cached"},
		{"over the bound, soonest by what the approximate index guesses it caches: the bound holds",
			[]candidate{guess(c("cached", 300, 100, true)), c("idle", 0, 1000, false)}, "idle"},
		{"over the bound, soonest by a shorter queue within the yield, no cache advantage: the bound holds",
			[]candidate{c("over", 0, 1000, true), c("under", 200, 1000, false)}, "under"},
		{"over the bound, soonest, at exactly the yield: the bound holds",
			[]candidate{c("over", 0, 1000, true), c("under", 250, 1000, false)}, "under"},
		{"over the bound, soonest, the pods under it past the yield: the soonest",
			[]candidate{c("over", 0, 1000, true), c("under", 251, 1000, false)}, "over"},
		{"past the yield, but this request's uncached prompt there is a guess: the bound holds",
			[]candidate{guess(c("over", 0, 1000, true)), c("under", 251, 1000, false)}, "under"},
		{"over the bound, soonest by far behind a long queue elsewhere: the soonest",
			[]candidate{c("over", 300, 1000, true), c("under", 5000, 1000, false), c("under2", 4000, 1000, false)}, "over"},
		{"over the bound, soonest, less cached than the best under it: the bound holds",
			[]candidate{c("over", 0, 900, true), c("under", 500, 500, false)}, "under"},
		{"over the bound, less cached than the best under it, past the yield: the soonest",
			[]candidate{c("over", 0, 600, true), c("under", 300, 500, false)}, "over"},
		{"over the bound, nothing left to compute there, anything under it: the soonest",
			[]candidate{c("over", 0, 0, true), c("under", 0, 1, false)}, "over"},
		{"over the bound and not the soonest", []candidate{c("cached", 5000, 100, true), c("idle", 0, 1000, false)}, "idle"},
		{"every candidate over the bound: the soonest", []candidate{c("a", 0, 500, true), c("b", 0, 100, true)}, "b"},
	}
	for _, tc := range cases {
		if got := tc.cands[soonestBounded(tc.cands)].ep.Pod; got != tc.want {
			t.Errorf("%s: picked %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestOthersBacklog is the decision table of the other replicas' queued prefill estimate.
func TestOthersBacklog(t *testing.T) {
	q := func(w float64) ServerMetrics { return ServerMetrics{Waiting: w, HasQueue: true} }
	cases := []struct {
		name                                     string
		replicas                                 int
		srv                                      ServerMetrics
		has                                      bool
		ownPending, ownBacklog, typical, wantOut int
	}{
		{"one replica: its own backlog is exact", 1, q(10), true, 0, 0, 100, 0},
		{"no metrics", 3, ServerMetrics{}, false, 0, 0, 100, 0},
		{"no queue metric", 3, ServerMetrics{HasKV: true}, true, 0, 0, 100, 0},
		{"waiting beyond own pending, at own mean", 2, q(5), true, 2, 400, 100, 3 * 200},
		{"waiting beyond own pending, none own: this request's", 2, q(3), true, 0, 0, 100, 300},
		{"no more waiting than own", 2, q(2), true, 3, 300, 100, 0},
	}
	for _, c := range cases {
		if got := othersBacklog(c.replicas, c.srv, c.has, c.ownPending, c.ownBacklog, c.typical); got != c.wantOut {
			t.Errorf("%s: %d, want %d", c.name, got, c.wantOut)
		}
	}
}

// exactFixture is a pool of 3 pods with KV event addresses and an index where each pod has
// published; cached[i] is how many leading blocks of the prompt pod-i holds.
func exactFixture(t *testing.T, cached []int) (*route.Pool, *Picker, Input) {
	t.Helper()
	req, err := openai.Parse(openai.RouteCompletions, []byte(`{"model":"m","prompt":"`+words(160)+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	prompt := kvindex.DemoPrompt(req)
	hs := prompt.Hashes(16)
	p := testPool(len(cached))
	x := &kvindex.Index{}
	for i := range p.Endpoints {
		p.Endpoints[i].KVEvents = fmt.Sprintf("tcp://pod-%d:5557", i)
		x.Connected(p.Endpoints[i].KVEvents)
		ev := kvevents.Event{Kind: kvevents.TagBlockStored, Hashes: append([]kvevents.Hash{kvevents.IntHash(1)}, hs[:cached[i]]...), BlockSize: 16}
		x.Apply(p.Endpoints[i].KVEvents, kvevents.Message{Batch: kvevents.Batch{Events: []kvevents.Event{ev}}})
	}
	pk := &Picker{Load: NewLoad(), Prefix: NewPrefixIndex(8, 1000), KV: x}
	return p, pk, Input{KV: prompt, PromptTokens: prompt.Tokens()}
}

func words(n int) string {
	b := make([]byte, 0, 4*n)
	for i := 0; i < n; i++ {
		b = fmt.Appendf(b, "w%d ", i)
	}
	return string(b)
}

// TestPickExactIndex checks the picker against the exact index: the pod holding the longest
// prefix wins over what the routing history says, its uncached tokens are exact, and queued
// prefill ahead of it can outweigh its cache.
func TestPickExactIndex(t *testing.T) {
	p, pk, in := exactFixture(t, []int{0, 8, 3})
	in.Blocks = pk.Prefix.Blocks(pool, words(160))
	pk.Prefix.Record(in.Blocks, "pod-0") // history says pod-0; its cache says otherwise
	ch, ok := pk.Pick(p, in)
	if !ok || ch.Pod != "pod-1" || !(ch.Uncached == in.PromptTokens-8*16) {
		t.Fatalf("picked %s with %d uncached, want pod-1 with %d", ch.Pod, ch.Uncached, in.PromptTokens-8*16)
	}
	if u := pk.Uncached(in, p.Endpoints[2]); u != in.PromptTokens-3*16 {
		t.Fatalf("pinned pod-2's uncached = %d, want %d", u, in.PromptTokens-3*16)
	}
	// 160 tokens: pod-1 saves 128 of them; a queue of 150 uncached tokens ahead costs more.
	pk.Load.Acquire(pool, "pod-1", 10, 150)
	if ch, _ := pk.Pick(p, in); ch.Pod != "pod-2" {
		t.Fatalf("picked %s, want pod-2 (pod-1's queue outweighs its cache)", ch.Pod)
	}
	pk.Strategy = StrategyWeighted
	if ch, _ := pk.Pick(p, in); ch.Pod == "" {
		t.Fatal("the weighted strategy picked nothing")
	}
}

// TestPickFullyCachedRecomputesLastBlock: a prompt wholly in the cache still costs its last
// block, as the engine recomputes it.
func TestPickFullyCachedRecomputesLastBlock(t *testing.T) {
	p, pk, in := exactFixture(t, []int{10})
	if u := pk.Uncached(in, p.Endpoints[0]); u != in.PromptTokens-(in.PromptTokens-1)/16*16 {
		t.Fatalf("uncached %d of %d", u, in.PromptTokens)
	}
}

// TestPickBoundYieldsToShortQueue drives Pick: pod-0 holds three decoding requests (their first
// tokens came), which put it at the load bound with an empty prefill lane; the other pods each
// queue one uncached prompt. Behind long queues the bound yields to pod-0; behind short ones
// (within boundYield of pod-0's wait) it holds.
func TestPickBoundYieldsToShortQueue(t *testing.T) {
	for _, tc := range []struct {
		name    string
		queued  int
		want    string
		wantOut bool
	}{
		{"long queues under the bound: the soonest pod over it", 5000, "pod-0", true},
		{"short queues under the bound: the bound holds", 30, "pod-1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, pk, in := exactFixture(t, []int{0, 0, 0})
			for i := 0; i < 3; i++ {
				pk.Load.Acquire(pool, "pod-0", 10, 100).FirstToken()
			}
			pk.Load.Acquire(pool, "pod-1", 10, tc.queued)
			pk.Load.Acquire(pool, "pod-2", 10, tc.queued)
			in.Explain = true
			ch, ok := pk.Pick(p, in)
			if !ok || ch.Pod != tc.want {
				t.Fatalf("picked %s, want %s (%s)", ch.Pod, tc.want, FormatConsidered(ch.Considered))
			}
			if !ch.Considered[0].OverBound {
				t.Fatalf("pod-0 is not over the bound: the test puts no pressure on it (%s)", FormatConsidered(ch.Considered))
			}
		})
	}
}
