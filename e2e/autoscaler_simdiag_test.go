package e2e

// What TestAutoscalerMatchesSimulator logs to explain a gap between the live pool and the
// simulator: the failed requests by kind, phase and pod; the pods' own queues and TTFTs over the
// run (scraped from their /metrics); ready pods against spec.replicas and the simulated serving
// replicas; and where the live misses fall.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/scalesim"
)

// failureKind names a failed request's kind: the HTTP status and the gateway's error code, a
// transport error's class, or a stream that ended without a token (with the error event's code
// when the gateway sent one).
func failureKind(status int, code string, err error) string {
	switch {
	case status != 0 && status != http.StatusOK:
		return fmt.Sprintf("status %d %s", status, code)
	case status == http.StatusOK && code != "":
		return "stream error event " + code
	case status == http.StatusOK:
		return "stream ended without a token"
	}
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "transport timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "transport EOF"
	case err != nil && strings.Contains(err.Error(), "connection reset"):
		return "transport connection reset"
	case err != nil && strings.Contains(err.Error(), "connection refused"):
		return "transport connection refused"
	}
	return "transport other"
}

// errorCode reads an OpenAI error body's code (or type), "" when it has none.
func errorCode(body []byte) string {
	s := string(body)
	for _, key := range []string{`"code":"`, `"type":"`} {
		if i := strings.Index(s, key); i >= 0 {
			rest := s[i+len(key):]
			if j := strings.IndexByte(rest, '"'); j >= 0 {
				return rest[:j]
			}
		}
	}
	return ""
}

// phaseOf is the request's 30-s phase of the replay, by when it was sent.
func phaseOf(sent time.Duration) int { return int(sent / (30 * time.Second)) }

// logFailures logs the failed requests by kind, each kind with its count per 30-s phase and per
// pod that answered (none: the gateway answered before any pod did).
func logFailures(t *testing.T, results []replayed) {
	type agg struct {
		n      int
		phases map[int]int
		pods   map[string]int
		sample string
	}
	kinds := map[string]*agg{}
	for _, r := range results {
		if r.err == nil {
			continue
		}
		k := r.kind
		a := kinds[k]
		if a == nil {
			a = &agg{phases: map[int]int{}, pods: map[string]int{}, sample: r.err.Error()}
			kinds[k] = a
		}
		a.n++
		a.phases[phaseOf(r.sent)]++
		a.pods[cmp(r.pod, "none")]++
	}
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return kinds[names[i]].n > kinds[names[j]].n })
	for _, k := range names {
		a := kinds[k]
		t.Logf("failed: %d x %q; per 30-s phase %v; per pod %v; e.g. %.200s", a.n, k, sortedInts(a.phases), a.pods, a.sample)
	}
}

func cmp(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// sortedInts formats m as "k:v" in key order.
func sortedInts(m map[int]int) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%ds:%d", 30*k, m[k])
	}
	return b.String()
}

// podStats is one pod's engine metrics, as last scraped, and its queue over the run.
type podStats struct {
	waiting, running          float64 // last gauges
	maxWaiting                float64
	queueSum, queueN          float64 // vllm:request_queue_time_seconds
	ttftSum, ttftN            float64 // vllm:time_to_first_token_seconds
	prefillSum, prefillN      float64 // vllm:request_prefill_time_seconds
	promptTokens              float64 // vllm:prompt_tokens_total
	prefixQueries, prefixHits float64
	readySince, firstScraped  float64
}

// podWatch scrapes every pool pod's /metrics every 2 s: the pods' own queue times and TTFTs
// (what the gateway and the client add is the rest), and the waiting requests per pod over time
// (how evenly the gateway spread the load).
type podWatch struct {
	start time.Time
	mu    sync.Mutex
	pods  map[string]*podStats // by pod name+UID
	// timeline: per sample, the time, ready pods and each ready pod's waiting requests.
	timeline []podTick
}

type podTick struct {
	at      float64
	ready   int
	waiting map[string]float64
}

func watchPods(ctx context.Context, e *Env, ns, pool string, start time.Time) *podWatch {
	w := &podWatch{start: start, pods: map[string]*podStats{}}
	hc := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for ctx.Err() == nil {
		pods, err := e.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: nnv1.PoolLabel + "=" + pool})
		if err == nil {
			tk := podTick{at: time.Since(start).Seconds(), waiting: map[string]float64{}}
			for i := range pods.Items {
				p := &pods.Items[i]
				if !podIsReady(p) || p.Status.PodIP == "" {
					continue
				}
				tk.ready++
				fams, err := scrapeFamilies(hc, fmt.Sprintf("http://%s:8000/metrics", p.Status.PodIP))
				if err != nil {
					continue
				}
				key := p.Name + "/" + string(p.UID)[:5]
				w.mu.Lock()
				s := w.pods[key]
				if s == nil {
					s = &podStats{firstScraped: tk.at}
					w.pods[key] = s
				}
				s.update(fams)
				tk.waiting[p.Name] = s.waiting
				w.mu.Unlock()
			}
			w.mu.Lock()
			w.timeline = append(w.timeline, tk)
			w.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	return w
}

func scrapeFamilies(hc *http.Client, url string) (map[string]float64, error) {
	resp, err := hc.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			switch {
			case m.GetHistogram() != nil:
				out[name+"_sum"] += m.GetHistogram().GetSampleSum()
				out[name+"_count"] += float64(m.GetHistogram().GetSampleCount())
			case m.GetCounter() != nil:
				out[name] += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[name] += m.GetGauge().GetValue()
			}
		}
	}
	return out, nil
}

func (s *podStats) update(f map[string]float64) {
	s.waiting, s.running = f["vllm:num_requests_waiting"], f["vllm:num_requests_running"]
	s.maxWaiting = math.Max(s.maxWaiting, s.waiting)
	s.queueSum, s.queueN = f["vllm:request_queue_time_seconds_sum"], f["vllm:request_queue_time_seconds_count"]
	s.ttftSum, s.ttftN = f["vllm:time_to_first_token_seconds_sum"], f["vllm:time_to_first_token_seconds_count"]
	s.prefillSum, s.prefillN = f["vllm:request_prefill_time_seconds_sum"], f["vllm:request_prefill_time_seconds_count"]
	s.promptTokens = f["vllm:prompt_tokens_total"]
	s.prefixQueries, s.prefixHits = f["vllm:prefix_cache_queries_total"], f["vllm:prefix_cache_hits_total"]
}

// log writes each pod's totals and, every 10 s, the ready pods and their waiting requests.
func (w *podWatch) log(t *testing.T) {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := make([]string, 0, len(w.pods))
	for k := range w.pods {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var all podStats
	for _, k := range keys {
		s := w.pods[k]
		t.Logf("pod %s (first scraped t=%.0fs): %.0f first tokens, pod TTFT mean %.3f s, queue %.3f s, prefill %.3f s (%.0f prompt tokens/s of prefill), most waiting %.0f",
			k, s.firstScraped, s.ttftN, div(s.ttftSum, s.ttftN), div(s.queueSum, s.queueN), div(s.prefillSum, s.prefillN),
			div(s.promptTokens, s.prefillSum), s.maxWaiting)
		all.ttftSum, all.ttftN = all.ttftSum+s.ttftSum, all.ttftN+s.ttftN
		all.queueSum, all.queueN = all.queueSum+s.queueSum, all.queueN+s.queueN
	}
	t.Logf("pods together: %.0f first tokens, pod TTFT mean %.3f s, of which queue %.3f s", all.ttftN, div(all.ttftSum, all.ttftN), div(all.queueSum, all.queueN))
	next := 0.0
	for _, tk := range w.timeline {
		if tk.at < next {
			continue
		}
		next = tk.at + 10
		names := make([]string, 0, len(tk.waiting))
		for n := range tk.waiting {
			names = append(names, n)
		}
		sort.Strings(names)
		var b strings.Builder
		for _, n := range names {
			fmt.Fprintf(&b, " %s:%.0f", n, tk.waiting[n])
		}
		t.Logf("t=%3.0fs ready %d, waiting per pod:%s", tk.at, tk.ready, b.String())
	}
}

func div(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// readyAt is the number of ready pods at second s of the run (the latest sample at or before it).
func (w *podWatch) readyAt(s float64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, tk := range w.timeline {
		if tk.at > s {
			break
		}
		n = tk.ready
	}
	return n
}

// logGap logs, per 30-s phase, the live requests, failures, misses and mean TTFT beside the
// simulated misses, and the live ready pods and spec.replicas against the simulated serving
// replicas; then splits the live misses by whether the pool had as many ready pods as the
// simulator was serving with when the request was sent (fewer: scale-up lag; as many: routing
// and the pods themselves).
func logGap(t *testing.T, results []replayed, slo time.Duration, sim scalesim.Result, w *podWatch, rec *poolRecorder) {
	type phase struct {
		n, failed, missed int
		ttft              time.Duration
		simServed, simMis int
	}
	ph := map[int]*phase{}
	get := func(i int) *phase {
		if ph[i] == nil {
			ph[i] = &phase{}
		}
		return ph[i]
	}
	simServing := func(s float64) float64 {
		v := 0.0
		for _, p := range sim.Series {
			if p.T > s {
				break
			}
			v = p.Serving
		}
		return v
	}
	lagMiss, lagN, capMiss, capN := 0, 0, 0, 0
	for _, r := range results {
		p := get(phaseOf(r.sent))
		p.n++
		short := float64(w.readyAt(r.sent.Seconds())) < simServing(r.sent.Seconds())
		if short {
			lagN++
		} else {
			capN++
		}
		switch {
		case r.err != nil:
			p.failed++
		case r.ttft > slo:
			p.missed++
			p.ttft += r.ttft
		default:
			p.ttft += r.ttft
		}
		if r.err != nil || r.ttft > slo {
			if short {
				lagMiss++
			} else {
				capMiss++
			}
		}
	}
	for _, p := range sim.Series {
		q := get(int(math.Max(p.T-1e-9, 0) / 30))
		q.simServed += p.Served
		q.simMis += p.Misses
	}
	keys := make([]int, 0, len(ph))
	for k := range ph {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	for _, k := range keys {
		p := ph[k]
		s := float64(30*k + 15)
		reps, _, _ := perSecond(rec.replicaAt, rec.replicas, s+1)
		spec := 0.0
		if len(reps) > 0 {
			spec = reps[len(reps)-1]
		}
		t.Logf("phase %3ds: live %d sent, %d failed, %d over the SLO, mean TTFT of the answered %.3f s; simulated %d of %d over; at mid-phase ready pods %d, spec.replicas %.0f, simulated serving %.0f",
			30*k, p.n, p.failed, p.missed, div(p.ttft.Seconds(), float64(p.n-p.failed)), p.simMis, p.simServed, w.readyAt(s), spec, simServing(s))
	}
	t.Logf("live misses and failures: %d of %d requests sent while fewer pods were ready than the simulator served with (scale-up lag), %d of %d sent with as many or more (routing, pod capacity, CPU)",
		lagMiss, lagN, capMiss, capN)
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		t.Logf("load average at the end: %s", strings.TrimSpace(string(la)))
	}
}
