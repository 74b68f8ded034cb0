package rollout

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sort"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/rolloutpolicy"
)

// SampleSource reads a rollout's samples on its current step.
type SampleSource interface {
	Samples(ctx context.Context, r *nnv1.AgentRollout) (*rolloutpolicy.Samples, error)
}

// GatewayScraper reads every gateway replica's /metrics and sums the rollout's series. The
// gateway replicas are either fixed URLs or the running pods that match a label selector.
type GatewayScraper struct {
	// URLs are fixed /metrics URLs (host-process mode, tests).
	URLs []string
	// Reader lists the gateway pods (uncached: the controller's cache holds only pool pods).
	Reader client.Reader
	// Namespace and Selector find the gateway pods; Port is their admin (metrics) port.
	Namespace string
	Selector  labels.Selector
	Port      int
	// Client fetches (default: 2s timeout).
	Client *http.Client
}

// Samples implements SampleSource. A replica that cannot be read fails the whole read: a partial
// sum could hide the canary's errors.
func (g *GatewayScraper) Samples(ctx context.Context, r *nnv1.AgentRollout) (*rolloutpolicy.Samples, error) {
	urls, err := g.targets(ctx)
	if err != nil {
		return nil, err
	}
	if len(urls) == 0 {
		return nil, fmt.Errorf("no gateway replica to read samples from")
	}
	acc := newAccumulator(r.Namespace, r.Name, r.Status.StepID)
	for _, u := range urls {
		fams, err := g.fetch(ctx, u)
		if err != nil {
			return nil, fmt.Errorf("gateway metrics %s: %w", u, err)
		}
		acc.add(fams)
	}
	return acc.samples(), nil
}

func (g *GatewayScraper) targets(ctx context.Context) ([]string, error) {
	if len(g.URLs) > 0 || g.Reader == nil {
		return g.URLs, nil
	}
	var pods corev1.PodList
	if err := g.Reader.List(ctx, &pods, client.InNamespace(g.Namespace), client.MatchingLabelsSelector{Selector: g.Selector}); err != nil {
		return nil, fmt.Errorf("list gateway pods: %w", err)
	}
	var out []string
	for _, p := range pods.Items {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		out = append(out, "http://"+net.JoinHostPort(p.Status.PodIP, strconv.Itoa(g.Port))+"/metrics")
	}
	sort.Strings(out)
	return out, nil
}

func (g *GatewayScraper) fetch(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	c := g.Client
	if c == nil {
		c = &http.Client{Timeout: 2 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(io.LimitReader(resp.Body, 64<<20))
}

// accumulator sums the series of one rollout step across replicas.
type accumulator struct {
	ns, name, step string
	s              rolloutpolicy.Samples
}

func newAccumulator(ns, name, step string) *accumulator {
	return &accumulator{ns: ns, name: name, step: step}
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// side returns the variant a series counts for: stable takes live samples only, the canary live
// and shadow ones.
func (a *accumulator) side(l map[string]string) *rolloutpolicy.Variant {
	if l["namespace"] != a.ns || l["rollout"] != a.name || l["step"] != a.step {
		return nil
	}
	switch {
	case l["variant"] == "canary":
		return &a.s.Canary
	case l["variant"] == "stable" && (l["mode"] == "" || l["mode"] == "live"):
		return &a.s.Stable
	}
	return nil
}

func (a *accumulator) add(fams map[string]*dto.MetricFamily) {
	for _, m := range fams[nnv1.RolloutRequestsMetric].GetMetric() {
		l := labelsOf(m)
		if v := a.side(l); v != nil {
			n := int64(m.GetCounter().GetValue())
			v.Requests += n
			if l["outcome"] == "error" {
				v.Errors += n
			}
		}
	}
	for _, m := range fams[nnv1.RolloutSafetyMetric].GetMetric() {
		if v := a.side(labelsOf(m)); v != nil {
			v.SafetyBlocks += int64(m.GetCounter().GetValue())
		}
	}
	for _, m := range fams[nnv1.RolloutTTFTMetric].GetMetric() {
		if v := a.side(labelsOf(m)); v != nil {
			v.TTFT.Add(histogramOf(m.GetHistogram()))
		}
	}
	for _, m := range fams[nnv1.RolloutQualityMetric].GetMetric() {
		l := labelsOf(m)
		l["mode"] = "live"
		if v := a.side(l); v != nil {
			v.Quality.Add(histogramOf(m.GetHistogram()))
		}
	}
}

// histogramOf converts Prometheus' cumulative buckets to per-bucket counts with a +Inf bucket.
func histogramOf(h *dto.Histogram) rolloutpolicy.Histogram {
	out := rolloutpolicy.Histogram{Sum: h.GetSampleSum()}
	prev := 0.0
	for _, b := range h.GetBucket() {
		if math.IsInf(b.GetUpperBound(), 1) {
			continue
		}
		c := float64(b.GetCumulativeCount())
		out.Bounds = append(out.Bounds, b.GetUpperBound())
		out.Counts = append(out.Counts, c-prev)
		prev = c
	}
	out.Bounds = append(out.Bounds, math.Inf(1))
	out.Counts = append(out.Counts, float64(h.GetSampleCount())-prev)
	return out
}

func (a *accumulator) samples() *rolloutpolicy.Samples { s := a.s; return &s }
