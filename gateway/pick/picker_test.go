package pick

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/gateway/route"
)

func testPool(n int) *route.Pool {
	p := &route.Pool{Ref: pool, Policy: route.DefaultPolicy()}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("pod-%d", i)
		p.Endpoints = append(p.Endpoints, route.Endpoint{Pod: name, Addr: name + ":8000", MetricsURL: "http://" + name + "/metrics"})
	}
	return p
}

// TestPickNoPrefixCachingPod checks that a pod whose engine says it does not cache prefixes
// (vllm:cache_config_info enable_prefix_caching="False") is not credited with what the
// approximate index remembers sending it: the prompt is all uncached there, and an idle pod wins
// over one that was sent the prefix and has a request pending.
func TestPickNoPrefixCachingPod(t *testing.T) {
	p := testPool(2)
	for _, off := range []bool{false, true} {
		sc := &Scraper{}
		if off {
			sc.Set("http://pod-0/metrics", ServerMetrics{HasCacheConfig: true, PrefixCaching: false, At: time.Now()})
		}
		pk := &Picker{Load: NewLoad(), Prefix: NewPrefixIndex(8, 1000), Metrics: sc}
		blocks := pk.Prefix.Blocks(pool, strings.Repeat("w ", 1000))
		pk.Prefix.Record(blocks, "pod-0")
		in := Input{Blocks: blocks, PromptTokens: 1000}
		lease := pk.Load.Acquire(pool, "pod-0", 1000, pk.Uncached(in, p.Endpoints[0]))
		ch, _ := pk.Pick(p, in)
		lease.Release()
		wantUncached, wantPod := 0, "pod-0"
		if off {
			wantUncached, wantPod = 1000, "pod-1"
		}
		if u := pk.Uncached(in, p.Endpoints[0]); u != wantUncached || ch.Pod != wantPod {
			t.Errorf("prefix caching off %v: pod-0 uncached %d (want %d), picked %s (want %s)", off, u, wantUncached, ch.Pod, wantPod)
		}
	}
}

func TestPickPrefersPrefixOwner(t *testing.T) {
	p := testPool(4)
	pk := &Picker{Load: NewLoad(), Prefix: NewPrefixIndex(8, 1000)}
	blocks := pk.Prefix.Blocks(pool, strings.Repeat("conversation so far ", 20))
	pk.Prefix.Record(blocks, "pod-2")
	ep, ok := pk.Pick(p, Input{RingKey: "any", Blocks: blocks})
	if !ok || ep.Pod != "pod-2" {
		t.Fatalf("picked %v, want pod-2 (served the prefix)", ep.Pod)
	}
}

func TestPickAvoidsLoadAndRespectsBound(t *testing.T) {
	p := testPool(2)
	pk := &Picker{Load: NewLoad(), Prefix: NewPrefixIndex(8, 1000)}
	blocks := pk.Prefix.Blocks(pool, strings.Repeat("x", 64))
	pk.Prefix.Record(blocks, "pod-0")
	// pod-0 holds the prefix but 3 of 3 in-flight requests: bound = ceil(1.25*4/2) = 3, so it
	// may not take a 4th.
	for i := 0; i < 3; i++ {
		pk.Load.Acquire(pool, "pod-0", 10, 0)
	}
	if pk.UnderBound(p, "pod-0") {
		t.Fatal("pod-0 under bound with 3 of 3 in flight")
	}
	ep, _ := pk.Pick(p, Input{RingKey: "k", Blocks: blocks})
	if ep.Pod != "pod-1" {
		t.Fatalf("picked %s, want pod-1 (pod-0 over its load bound)", ep.Pod)
	}
}

func TestPickQueueAndKVScorers(t *testing.T) {
	p := testPool(3)
	sc := &Scraper{Interval: time.Second}
	now := time.Now()
	sc.Now = func() time.Time { return now }
	sc.Set(p.Endpoints[0].MetricsURL, ServerMetrics{Waiting: 10, Running: 4, HasQueue: true, KVUsage: 0.9, HasKV: true, At: now})
	sc.Set(p.Endpoints[1].MetricsURL, ServerMetrics{Waiting: 0, Running: 1, HasQueue: true, KVUsage: 0.1, HasKV: true, At: now})
	// pod-2's sample is stale: treated as unknown (the mean), not as idle.
	sc.Set(p.Endpoints[2].MetricsURL, ServerMetrics{Waiting: 0, Running: 0, HasQueue: true, KVUsage: 0, HasKV: true, At: now.Add(-time.Minute)})
	pk := &Picker{Load: NewLoad(), Metrics: sc}
	p.Policy.Weights = route.Weights{Queue: 2, KVCache: 1}
	ep, _ := pk.Pick(p, Input{RingKey: "k"})
	if ep.Pod != "pod-1" {
		t.Fatalf("picked %s, want pod-1 (short queue, free KV cache)", ep.Pod)
	}
	if _, ok := sc.Get(p.Endpoints[2].MetricsURL); ok {
		t.Fatal("stale sample served")
	}
}

func TestPickExcludeAndHashTieBreak(t *testing.T) {
	p := testPool(3)
	pk := &Picker{Load: NewLoad()}
	first, _ := pk.Pick(p, Input{RingKey: "session-7"})
	again, _ := pk.Pick(p, Input{RingKey: "session-7"})
	if noKey, _ := pk.Pick(p, Input{}); noKey.Pod != "pod-0" {
		t.Fatalf("idle pool, no session key: picked %s, want the first by name (no hash noise)", noKey.Pod)
	}
	if first.Pod != again.Pod || first.Uncached != again.Uncached {
		t.Fatalf("idle pool: same key picked %s then %s", first.Pod, again.Pod)
	}
	next, _ := pk.Pick(p, Input{RingKey: "session-7", Exclude: map[string]bool{first.Pod: true}})
	if next.Pod == first.Pod {
		t.Fatal("excluded pod picked")
	}
	if _, ok := pk.Pick(p, Input{Exclude: map[string]bool{"pod-0": true, "pod-1": true, "pod-2": true}}); ok {
		t.Fatal("picked with every pod excluded")
	}
}

func TestLoadLeaseRelease(t *testing.T) {
	l := NewLoad()
	a := l.Acquire(pool, "p", 100, 60)
	b := l.Acquire(pool, "p", 50, 30)
	if r, tok, pre := l.Pod(pool, "p"); r != 2 || tok != 150 || pre != 90 || l.Pool(pool) != 2 {
		t.Fatalf("load %d/%d/%d pool %d", r, tok, pre, l.Pool(pool))
	}
	a.FirstToken()
	a.FirstToken() // idempotent
	if _, _, pre := l.Pod(pool, "p"); pre != 30 {
		t.Fatalf("prefill backlog after a's first token %d, want 30", pre)
	}
	a.Release()
	a.Release() // idempotent
	b.Release() // ends b's backlog too
	if r, tok, pre := l.Pod(pool, "p"); r != 0 || tok != 0 || pre != 0 || l.Total() != 0 {
		t.Fatalf("after release %d/%d/%d total %d", r, tok, pre, l.Total())
	}
}

func TestParseServerMetrics(t *testing.T) {
	in := `# HELP vllm:num_requests_waiting waiting
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="a"} 3
vllm:num_requests_waiting{model_name="b",engine="0"} 2
vllm:num_requests_running{model_name="a"} 5 1700000000000
vllm:kv_cache_usage_perc{model_name="a",note="has } brace"} 0.25
vllm:gpu_cache_usage_perc{model_name="a"} 0.99
other_metric 7
`
	m, err := ParseServerMetrics(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if m.Waiting != 5 || m.Running != 5 || !m.HasQueue || m.KVUsage != 0.25 || !m.HasKV {
		t.Fatalf("parsed %+v", m)
	}
	m, _ = ParseServerMetrics(strings.NewReader("vllm:gpu_cache_usage_perc 0.5\n"))
	if m.HasKV || m.HasQueue {
		t.Fatalf("deprecated name used: %+v", m)
	}
}

// The exposition is parsed by the Prometheus text parser: escaped label values and UTF-8 quoted
// names read as Prometheus reads them, non-finite samples are not used, and a body that is not an
// exposition is an error rather than an idle pod.
func TestParseServerMetricsFormat(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     ServerMetrics
		err      bool
	}{
		{name: "escaped quote and brace", in: `vllm:num_requests_waiting{model_name="a",note="x\" } y"} 4` + "\n", want: ServerMetrics{Waiting: 4, HasQueue: true}},
		{name: "quoted name", in: `{"vllm:num_requests_running",model_name="a"} 2` + "\n", want: ServerMetrics{Running: 2, HasQueue: true}},
		{name: "NaN and Inf skipped", in: "vllm:kv_cache_usage_perc{m=\"a\"} NaN\nvllm:kv_cache_usage_perc{m=\"b\"} 0.5\nvllm:num_requests_waiting +Inf\n", want: ServerMetrics{KVUsage: 0.5, HasKV: true}},
		{name: "prefill counters, histogram sum", in: "vllm:prompt_tokens_total 1000\nvllm:prefix_cache_hits_total 200\n# TYPE vllm:request_prefill_time_seconds histogram\nvllm:request_prefill_time_seconds_bucket{le=\"+Inf\"} 3\nvllm:request_prefill_time_seconds_sum 0.4\nvllm:request_prefill_time_seconds_count 3\n",
			want: ServerMetrics{PromptTokens: 1000, PrefixHits: 200, PrefillSeconds: 0.4, HasPrefill: true}},
		{name: "prefill sum without TYPE line", in: "vllm:prompt_tokens_total 1000\nvllm:prefix_cache_hits_total 200\nvllm:request_prefill_time_seconds_sum 0.4\n",
			want: ServerMetrics{PromptTokens: 1000, PrefixHits: 200, PrefillSeconds: 0.4, HasPrefill: true}},
		{name: "prefill counters without the time", in: "vllm:prompt_tokens_total 1000\nvllm:prefix_cache_hits_total 200\n", want: ServerMetrics{}},
		{name: "not an exposition", in: "<html>vllm:num_requests_waiting 3</html>\n", err: true},
		{name: "truncated label set", in: `vllm:num_requests_waiting{model_name="a" 3` + "\n", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseServerMetrics(strings.NewReader(tc.in))
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if err == nil && m != tc.want {
				t.Fatalf("parsed %+v, want %+v", m, tc.want)
			}
		})
	}
}

// TestPrefillRate is the decision table of the engine-reported prefill rate.
func TestPrefillRate(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    ServerMetrics
		want float64
	}{
		{"computed tokens over prefill seconds", ServerMetrics{PromptTokens: 1000, PrefixHits: 200, PrefillSeconds: 0.4, HasPrefill: true}, 2000},
		{"counters not read", ServerMetrics{PromptTokens: 1000, PrefillSeconds: 0.4}, 0},
		{"no prefill time yet", ServerMetrics{PromptTokens: 1000, HasPrefill: true}, 0},
		{"too few computed tokens to tell", ServerMetrics{PromptTokens: 100, PrefixHits: 50, PrefillSeconds: 0.001, HasPrefill: true}, 0},
	} {
		if got := tc.m.PrefillRate(); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The prefill scorer sends a request where its first token comes soonest by the gateway's
// estimate: the pod's pending prefill plus the request's tokens it has not cached.
func TestPickPrefillCost(t *testing.T) {
	p := testPool(3)
	p.Policy.Weights = route.Weights{Prefill: 1}
	pk := &Picker{Load: NewLoad(), Prefix: NewPrefixIndex(8, 1000)}
	prompt := strings.Repeat("abcdefgh", 100) // 100 blocks
	in := Input{Blocks: pk.Prefix.Blocks(pool, prompt), PromptTokens: 1000}
	// pod-0 cached 90% of the prompt but has 3000 tokens of prefill ahead; pod-1 nothing cached
	// and 500 ahead; pod-2 nothing cached and 2000 ahead.
	pk.Prefix.Record(in.Blocks[:90], "pod-0")
	pk.Load.Acquire(pool, "pod-0", 0, 3000)
	pk.Load.Acquire(pool, "pod-1", 0, 500)
	pk.Load.Acquire(pool, "pod-2", 0, 2000)
	p.Policy.LoadFactor = 10 // the bound plays no part here
	ch, _ := pk.Pick(p, in)
	if ch.Pod != "pod-1" || ch.Uncached != 1000 {
		t.Fatalf("picked %s (uncached %d): want pod-1, 500+1000 < 3000+100", ch.Pod, ch.Uncached)
	}
	// Once pod-0's backlog clears, its cache wins: 0+100 against 500+1000.
	pk.Load = NewLoad()
	pk.Load.Acquire(pool, "pod-1", 0, 500)
	ch, _ = pk.Pick(p, in)
	if ch.Pod != "pod-0" || ch.Uncached != 100 {
		t.Fatalf("picked %s (uncached %d): want pod-0 with 100 uncached", ch.Pod, ch.Uncached)
	}
	if u := pk.Uncached(in, route.Endpoint{Pod: "pod-2"}); u != 1000 {
		t.Fatalf("Uncached(pod-2) = %d", u)
	}
}

// The scraper asks only for the metrics it reads and keeps fresh samples per endpoint.
func TestScraperScrapesTable(t *testing.T) {
	var query, encoding string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		query, encoding = r.URL.RawQuery, r.Header.Get("Accept-Encoding")
		fmt.Fprintln(w, "vllm:num_requests_waiting 2\nvllm:num_requests_running 3\nvllm:kv_cache_usage_perc 0.5\n"+
			`vllm:cache_config_info{block_size="16",enable_prefix_caching="False"} 1`)
	}))
	defer srv.Close()
	p := &route.Pool{Ref: pool, Endpoints: []route.Endpoint{{Pod: "a", MetricsURL: srv.URL + "/metrics"}}}
	sc := &Scraper{Table: route.NewTable(route.NewSnapshot([]*route.Pool{p})), Interval: time.Hour}
	sc.scrapeAll(context.Background())
	m, ok := sc.Get(srv.URL + "/metrics")
	if !ok || m.Waiting != 2 || m.Running != 3 || m.KVUsage != 0.5 {
		t.Fatalf("sample %+v %v", m, ok)
	}
	if !strings.Contains(query, "name[]=vllm:num_requests_waiting") || strings.Count(query, "name[]=") != 8 {
		t.Fatalf("query %q", query)
	}
	if strings.Contains(encoding, "gzip") { // compressing a few hundred bytes costs more than it saves
		t.Fatalf("scrape asked for Accept-Encoding %q", encoding)
	}
	if !m.HasCacheConfig || m.PrefixCaching || !sc.NoPrefixCaching(srv.URL+"/metrics") {
		t.Fatalf("cache config %+v, no prefix caching %v", m, sc.NoPrefixCaching(srv.URL+"/metrics"))
	}
}
