package scaleloop

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/controller/scalepolicy"
)

// vllmText renders a vLLM-style exposition with the given counters.
func vllmText(waiting, running, prompt, gen float64, ttftLE []float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} %g\n", waiting)
	fmt.Fprintf(&b, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} %g\n", running)
	fmt.Fprintf(&b, "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{model_name=\"m\"} %g\n", prompt)
	fmt.Fprintf(&b, "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{model_name=\"m\"} %g\n", gen)
	b.WriteString("# TYPE vllm:time_to_first_token_seconds histogram\n")
	bounds := []string{"0.1", "0.5", "1", "+Inf"}
	for i, le := range bounds {
		fmt.Fprintf(&b, "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=%q} %g\n", le, ttftLE[i])
	}
	fmt.Fprintf(&b, "vllm:time_to_first_token_seconds_sum{model_name=\"m\"} 1\nvllm:time_to_first_token_seconds_count{model_name=\"m\"} %g\n", ttftLE[3])
	return b.String()
}

const neuronetesText = `# TYPE neuronetes_tokens_in_queue gauge
neuronetes_tokens_in_queue 1200
# TYPE neuronetes_concurrent_sessions gauge
neuronetes_concurrent_sessions 7
# TYPE neuronetes_tokens_total counter
neuronetes_tokens_total 5000
# TYPE neuronetes_tool_latency_seconds histogram
neuronetes_tool_latency_seconds_bucket{le="1"} 3
neuronetes_tool_latency_seconds_bucket{le="+Inf"} 4
neuronetes_tool_latency_seconds_sum 2
neuronetes_tool_latency_seconds_count 4
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting 2
`

const sglangText = `# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} 5
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 3
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{model_name="m"} 250
`

func TestParseMetrics(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name                                  string
		text                                  string
		queue, tiq, sess, tokens, gauge, tool float64
		ttftCount                             float64
	}{
		{"vllm", vllmText(4, 6, 1000, 200, []float64{1, 2, 3, 4}), 4, nan, 6, 1200, nan, nan, 4},
		{"neuronetes names win over vllm", neuronetesText, 2, 1200, 7, 5000, nan, 4, -1},
		{"sglang", sglangText, 5, nan, 3, nan, 250, nan, -1},
	}
	eq := func(a, b float64) bool { return (math.IsNaN(a) && math.IsNaN(b)) || a == b }
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseMetrics(strings.NewReader(tc.text), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if !eq(s.QueueDepth, tc.queue) || !eq(s.TokensInQueue, tc.tiq) || !eq(s.Sessions, tc.sess) ||
				!eq(s.Tokens, tc.tokens) || !eq(s.TokenGauge, tc.gauge) || !eq(s.Tools, tc.tool) {
				t.Fatalf("got %+v", s)
			}
			if (tc.ttftCount < 0) != (s.TTFT == nil) || (s.TTFT != nil && s.TTFT.Count != tc.ttftCount) {
				t.Fatalf("ttft histogram %+v, want count %v", s.TTFT, tc.ttftCount)
			}
		})
	}
	if _, err := ParseMetrics(strings.NewReader("bad metric{"), time.Now()); err == nil {
		t.Fatal("garbage parsed")
	}
}

func TestHistogramQuantile(t *testing.T) {
	h := &Histogram{Bounds: []float64{0.1, 0.5, 1, math.Inf(1)}, Counts: []float64{50, 90, 100, 100}, Count: 100}
	tests := []struct{ q, want float64 }{{0.5, 0.1}, {0.95, 0.75}, {0.7, 0.3}, {1, 1}}
	for _, tc := range tests {
		if got, ok := h.Quantile(tc.q); !ok || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("q%.2f = %v, want %v", tc.q, got, tc.want)
		}
	}
	inf := &Histogram{Bounds: []float64{1, math.Inf(1)}, Counts: []float64{1, 10}, Count: 10}
	if got, _ := inf.Quantile(0.95); got != 1 {
		t.Errorf("+Inf bucket quantile %v, want the last finite bound 1", got)
	}
	if _, ok := (&Histogram{}).Quantile(0.95); ok {
		t.Error("quantile of an empty histogram")
	}
}

func TestHistogramCountAtOrBelow(t *testing.T) {
	// vLLM's TTFT buckets around a 2 s SLO: 50 first tokens under 1 s, 40 in (1, 2.5], 10 over 5 s.
	h := &Histogram{Bounds: []float64{1, 2.5, 5, math.Inf(1)}, Counts: []float64{50, 90, 90, 100}, Count: 100}
	tests := []struct {
		x, want float64
	}{
		{0.5, 25}, // interpolated from 0 in the first bucket
		{1, 50},   // on a bound
		{2, 50 + 40*(1.0/1.5)},
		{5, 90},
		{60, 90}, // the +Inf bucket never counts as within
	}
	for _, tc := range tests {
		if got := h.CountAtOrBelow(tc.x); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("CountAtOrBelow(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
	c := TTFTCounts(h, 2*time.Second)
	wantMargin := h.CountAtOrBelow(scalepolicy.AdaptiveMarginRatio * 2)
	if c.Total != 100 || math.Abs(c.WithinSLO-(50+40/1.5)) > 1e-9 || c.WithinMargin != wantMargin {
		t.Errorf("TTFTCounts = %+v", c)
	}
	if (TTFTCounts(nil, time.Second) != scalepolicy.TTFTCounts{}) {
		t.Error("no histogram must count nothing")
	}
}

func TestScrapeAndCollect(t *testing.T) {
	// Two pods; pod b fails on the third round.
	round := 0
	pod := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if name == "b" && round == 2 {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
			k := float64(round)
			// per round: +1000 prompt, +200 generated tokens; 10 TTFT observations, 9 <= 0.5 s
			fmt.Fprint(w, vllmText(2+k, 4, 1000*k, 200*k, []float64{5 * k, 9 * k, 10 * k, 10 * k}))
		}))
	}
	a, b := pod("a"), pod("b")
	defer a.Close()
	defer b.Close()
	specs := []scalepolicy.MetricSpec{
		{Type: scalepolicy.QueueDepth, AveragingWindow: 30 * time.Second},
		{Type: scalepolicy.ConcurrentSessions},
		{Type: scalepolicy.TokensPerSecond, AveragingWindow: 30 * time.Second},
		{Type: scalepolicy.ContextLength},
		{Type: scalepolicy.TokensInQueue},
	}
	var c Collector
	sc := Scraper{}
	t0 := time.Now()
	var obs Observation
	for round = 0; round < 3; round++ {
		now := t0.Add(time.Duration(round) * 10 * time.Second)
		samples := map[string]PodSample{}
		for name, srv := range map[string]*httptest.Server{"a": a, "b": b} {
			s, err := sc.Scrape(context.Background(), srv.URL+"/metrics")
			if err != nil {
				continue
			}
			s.Time = now
			samples[name] = s
		}
		obs = c.Observe(now, samples, specs)
	}
	if obs.Reporting != 1 {
		t.Fatalf("reporting %d, want 1 (pod b failed)", obs.Reporting)
	}
	m := obs.Metrics
	check := func(mt scalepolicy.MetricType, want float64, valid bool) {
		t.Helper()
		v := m[mt]
		if v.Valid != valid || (valid && math.Abs(v.Value-want) > 1e-6) {
			t.Errorf("%s = %+v, want %v valid=%v", mt, v, want, valid)
		}
	}
	// queue depth per replica: rounds averaged over 30 s: 2, 3, 4 -> 3
	check(scalepolicy.QueueDepth, 3, true)
	check(scalepolicy.ConcurrentSessions, 4, true)
	// 1200 tokens per 10 s per pod
	check(scalepolicy.TokensPerSecond, 120, true)
	// 1200 tokens per 10 requests
	check(scalepolicy.ContextLength, 120, true)
	// vLLM exports no tokens-in-queue: missing, so the decision holds scale-down
	check(scalepolicy.TokensInQueue, 0, false)
	// implicit ttft-p95 from the bucket deltas: rank 9.5 of 10 in (0.5,1] -> 0.75
	check(scalepolicy.TTFTP95, 0.75, true)
	// The last round's first tokens (pod a only): 10, 9 of them at or under 0.5 s.
	if ft := obs.FirstTokens; ft == nil || ft.Count != 10 || ft.CountAtOrBelow(0.5) != 9 {
		t.Errorf("first tokens of the last round: %+v, want 10 with 9 at or under 0.5 s", ft)
	}

	// Stale: nothing reported for longer than StaleAfter.
	obs = c.Observe(t0.Add(10*time.Minute), map[string]PodSample{}, specs)
	if obs.Metrics[scalepolicy.QueueDepth].Valid || obs.Metrics[scalepolicy.TTFTP95].Valid {
		t.Fatalf("stale metrics still valid: %+v", obs.Metrics)
	}
}

func TestScrapeErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bad" {
			fmt.Fprint(w, "not{prometheus")
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	for _, path := range []string{"/missing", "/bad"} {
		if _, err := (Scraper{}).Scrape(context.Background(), srv.URL+path); err == nil || !strings.Contains(err.Error(), srv.URL+path) {
			t.Errorf("%s: got %v, want an error naming the URL", path, err)
		}
	}
}

func TestPromSource(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		w.Header().Set("Content-Type", "application/json")
		switch r.Form.Get("query") {
		case "sum(queue)":
			fmt.Fprint(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"1"},"value":[1,"40"]},{"metric":{"a":"2"},"value":[1,"2"]}]}}`)
		case "scalar(1)":
			fmt.Fprint(w, `{"status":"success","data":{"resultType":"scalar","result":[1,"7"]}}`)
		default:
			fmt.Fprint(w, `{"status":"success","data":{"resultType":"vector","result":[]}}`)
		}
	}))
	defer srv.Close()
	p, err := NewPromSource(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		q       string
		want    float64
		wantErr bool
	}{{"sum(queue)", 42, false}, {"scalar(1)", 7, false}, {"absent", 0, true}}
	for _, tc := range tests {
		got, err := p.Query(context.Background(), tc.q, time.Now())
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%s: got %v, %v", tc.q, got, err)
		}
	}
}

// prefillText is a vLLM exposition with a TTFT and a prefill-time histogram
// (bounds 1, 2, 4 s), cumulative counts per bound.
func prefillText(ttft, prefill [4]float64) string {
	var b strings.Builder
	for _, h := range []struct {
		name string
		le   [4]float64
	}{{"vllm:time_to_first_token_seconds", ttft}, {"vllm:request_prefill_time_seconds", prefill}} {
		fmt.Fprintf(&b, "# TYPE %s histogram\n", h.name)
		for i, le := range []string{"1", "2", "4", "+Inf"} {
			fmt.Fprintf(&b, "%s_bucket{le=%q} %g\n", h.name, le, h.le[i])
		}
		fmt.Fprintf(&b, "%s_sum 1\n%s_count %g\n", h.name, h.name, h.le[3])
	}
	return b.String()
}

func TestWaitCountsFromPrefillHistogram(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Between two scrapes 10 first tokens: 7 within a 4 s SLO; 2 of the 3
	// misses had a prefill over 4 s (they miss under any capacity): 1 miss
	// was caused by waiting.
	first, err := ParseMetrics(strings.NewReader(prefillText([4]float64{0, 0, 0, 0}, [4]float64{0, 0, 0, 0})), t0)
	if err != nil {
		t.Fatal(err)
	}
	second, err := ParseMetrics(strings.NewReader(prefillText([4]float64{4, 4, 7, 10}, [4]float64{8, 8, 8, 10})), t0.Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if second.Prefill == nil || second.Prefill.Count != 10 {
		t.Fatalf("prefill histogram %+v", second.Prefill)
	}
	var c Collector
	c.Observe(t0, map[string]PodSample{"a": first}, nil)
	obs := c.Observe(t0.Add(10*time.Second), map[string]PodSample{"a": second}, nil)
	got := WaitCounts(obs.FirstTokens, obs.Prefills, 4*time.Second)
	want := scalepolicy.TTFTCounts{Total: 10, WithinSLO: 7, WithinMargin: 4, PrefillKnown: true, PrefillWithinSLO: 8, PrefillWithinMargin: 8}
	if got.TTFTs == nil || got.Prefills == nil {
		t.Fatalf("got %+v: the TTFT and prefill histograms are not carried", got)
	}
	got.TTFTs, got.Prefills = nil, nil
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if noPrefill := WaitCounts(obs.FirstTokens, nil, 4*time.Second); noPrefill.PrefillKnown {
		t.Fatalf("without a prefill histogram the counts must not claim prefill times: %+v", noPrefill)
	}
}

func TestCollectorCapacitySample(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Pod a prefilled 8,000 prompt tokens in 4 prefill seconds between its
	// scrapes; pod b has no prompt-token counter and is left out of the
	// rate (its prefills still count in the histogram).
	expo := func(prompt, sum, count float64, withPrompt bool) string {
		var b strings.Builder
		b.WriteString("# TYPE vllm:request_prefill_time_seconds histogram\n")
		for _, le := range []string{"1", "2", "+Inf"} {
			fmt.Fprintf(&b, "vllm:request_prefill_time_seconds_bucket{le=%q} %g\n", le, count)
		}
		fmt.Fprintf(&b, "vllm:request_prefill_time_seconds_sum %g\nvllm:request_prefill_time_seconds_count %g\n", sum, count)
		if withPrompt {
			fmt.Fprintf(&b, "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total %g\n", prompt)
		}
		return b.String()
	}
	parse := func(s string, at time.Time) PodSample {
		p, err := ParseMetrics(strings.NewReader(s), at)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	var c Collector
	c.Observe(t0, map[string]PodSample{"a": parse(expo(1000, 1, 2, true), t0), "b": parse(expo(0, 1, 2, false), t0)}, nil)
	t1 := t0.Add(10 * time.Second)
	obs := c.Observe(t1, map[string]PodSample{"a": parse(expo(9000, 5, 6, true), t1), "b": parse(expo(0, 3, 5, false), t1)}, nil)
	got := obs.Capacity
	if got.PromptTokens != 8000 || got.PrefillSeconds != 4 {
		t.Fatalf("capacity sample %+v, want 8000 prompt tokens in 4 prefill seconds", got)
	}
	if len(got.PrefillBounds) != 3 || got.PrefillCumulative[2] != 7 {
		t.Fatalf("prefill histogram %v %v, want both pods' 7 prefills", got.PrefillBounds, got.PrefillCumulative)
	}
}
