package scaleloop

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/scalepolicy"
)

// GatewaySource reads what the gateway measures where requests pass (docs/gateway.md, "The
// autoscaler's view"): per agent pod, the prompt tokens of requests without a first token yet
// (tokens-in-queue), the sessions active in the last 5 minutes (concurrent-sessions) and the TTFT
// histogram (ttft-p95). Every gateway replica serves its part at
// /pools/<namespace>/<pool>/metrics on its admin port; the source sums the replicas (sessions
// counted in the shared Redis table are the same on every replica and are taken once).
type GatewaySource struct {
	// Client lists the gateway pods. It must see them: the controller's cache holds pool pods only,
	// so the command passes the manager's API reader.
	Client client.Reader
	// ListTTL reuses the last list of gateway pods for this long (0: list on every read), so the
	// apiserver sees one list per period however many pools read the gateway.
	ListTTL time.Duration
	// Now is the clock of ListTTL (default time.Now).
	Now func() time.Time
	// Namespace and Selector find the gateway pods.
	Namespace string
	Selector  labels.Selector
	// Port is the gateway's admin port.
	Port int
	// HTTP does the scrapes (default: 3 s timeout).
	HTTP *http.Client

	mu       sync.Mutex
	pods     []corev1.Pod
	listedAt time.Time
}

// gatewayPods lists the gateway pods, or returns the list made within ListTTL.
func (g *GatewaySource) gatewayPods(ctx context.Context) ([]corev1.Pod, error) {
	now := time.Now
	if g.Now != nil {
		now = g.Now
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ListTTL > 0 && !g.listedAt.IsZero() && now().Sub(g.listedAt) < g.ListTTL {
		return g.pods, nil
	}
	var pods corev1.PodList
	if err := g.Client.List(ctx, &pods, client.InNamespace(g.Namespace), client.MatchingLabelsSelector{Selector: g.Selector}); err != nil {
		return nil, fmt.Errorf("list gateway pods: %w", err)
	}
	g.pods, g.listedAt = pods.Items, now()
	return g.pods, nil
}

// gatewaySample is one pod's view summed over gateway replicas.
type gatewaySample struct {
	queue         float64
	sessions      float64
	sharedSession float64
	ttft          *Histogram
}

// Overlay replaces, in samples (by agent pod), the fields the gateway measures with the sum over
// the gateway's replicas; tokens waiting in the gateway before a pod was chosen are spread over
// the pods. Pods the gateway does not report keep their own values. A failure leaves samples
// as they are. It returns each answering gateway replica's offered-prompt-token counter (by
// gateway pod name; nil when none exported it), which OfferedRate turns into the offered demand.
func (g *GatewaySource) Overlay(ctx context.Context, pool *v1alpha1.AgentPool, samples map[string]PodSample) map[string]float64 {
	gw, unrouted, offered, err := g.read(ctx, pool)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Gateway metrics unavailable; using the pods' own", "err", err)
		return nil
	}
	if len(samples) == 0 {
		return offered
	}
	spread := unrouted / float64(len(samples))
	for name, s := range samples {
		v, ok := gw[name]
		if !ok {
			continue
		}
		s.TokensInQueue = v.queue + spread
		s.Sessions = v.sessions + v.sharedSession
		if v.ttft != nil {
			s.TTFT = v.ttft
		}
		samples[name] = s
	}
	return offered
}

// read scrapes every ready gateway replica and sums their views of pool.
func (g *GatewaySource) read(ctx context.Context, pool *v1alpha1.AgentPool) (map[string]*gatewaySample, float64, map[string]float64, error) {
	pods, err := g.gatewayPods(ctx)
	if err != nil {
		return nil, 0, nil, err
	}
	var offered map[string]float64
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]*gatewaySample{}
	unrouted, answered := 0.0, 0
	for i := range pods {
		p := &pods[i]
		if p.Status.PodIP == "" || !podReady(p) || !p.DeletionTimestamp.IsZero() {
			continue
		}
		url := "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(g.Port)) + "/pools/" + pool.Namespace + "/" + pool.Name + "/metrics"
		wg.Go(func() {
			fams, err := g.scrape(ctx, url)
			if err != nil {
				klog.FromContext(ctx).V(3).Info("Gateway replica scrape failed", "pod", p.Name, "err", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			answered++
			unrouted += mergeGateway(out, fams)
			if v, ok := offeredTokens(fams); ok {
				if offered == nil {
					offered = map[string]float64{}
				}
				offered[p.Name] = v
			}
		})
	}
	wg.Wait()
	if answered == 0 {
		return nil, 0, nil, fmt.Errorf("no gateway replica answered for pool %s/%s (selector %s in %s)", pool.Namespace, pool.Name, g.Selector, g.Namespace)
	}
	return out, unrouted, offered, nil
}

// offeredTokens is one gateway replica's counter of prompt tokens counted at arrival at the pool.
func offeredTokens(fams map[string]*dto.MetricFamily) (float64, bool) {
	f := fams["neuronetes_offered_prompt_tokens_total"]
	if f == nil || len(f.GetMetric()) == 0 {
		return 0, false
	}
	v := 0.0
	for _, m := range f.GetMetric() {
		v += m.GetCounter().GetValue()
	}
	return v, true
}

// OfferedRate turns successive readings of the gateway replicas' offered-prompt-token counters
// into the pool's offered demand: the sum of each replica's increase over the time between two
// readings. A replica seen once, or whose counter went down (a restart), is left out until its
// next reading; with no replica seen twice the demand is not valid.
type OfferedRate struct {
	prev map[string]float64
	at   time.Time
}

// Observe folds the counters read at now in (nil: the gateway was not read).
func (o *OfferedRate) Observe(now time.Time, counters map[string]float64) scalepolicy.OfferedDemand {
	prev, at := o.prev, o.at
	o.prev, o.at = counters, now
	dt := now.Sub(at).Seconds()
	if counters == nil || prev == nil || dt <= 0 {
		return scalepolicy.OfferedDemand{}
	}
	sum, seen := 0.0, false
	for pod, v := range counters {
		if p, ok := prev[pod]; ok && v >= p {
			sum, seen = sum+(v-p), true
		}
	}
	return scalepolicy.OfferedDemand{Valid: seen, PromptTokensPerSecond: sum / dt}
}

func (g *GatewaySource) scrape(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	c := g.HTTP
	if c == nil {
		c = &http.Client{Timeout: 3 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: status %s", url, resp.Status)
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return fams, nil
}

// mergeGateway adds one replica's families into out and returns its tokens waiting before a pod
// was chosen (pod="").
func mergeGateway(out map[string]*gatewaySample, fams map[string]*dto.MetricFamily) float64 {
	at := func(pod string) *gatewaySample {
		s := out[pod]
		if s == nil {
			s = &gatewaySample{}
			out[pod] = s
		}
		return s
	}
	unrouted := 0.0
	if f := fams["neuronetes_tokens_in_queue"]; f != nil {
		for _, m := range f.GetMetric() {
			pod, v := label(m, "pod"), m.GetGauge().GetValue()
			if pod == "" {
				unrouted += v
				continue
			}
			at(pod).queue += v
		}
	}
	if f := fams["neuronetes_concurrent_sessions"]; f != nil {
		for _, m := range f.GetMetric() {
			s, v := at(label(m, "pod")), m.GetGauge().GetValue()
			if label(m, "scope") == "shared" {
				s.sharedSession = math.Max(s.sharedSession, v)
			} else {
				s.sessions += v
			}
		}
	}
	if f := fams["neuronetes_ttft_seconds"]; f != nil {
		for _, m := range f.GetMetric() {
			h := histogram(&dto.MetricFamily{Type: f.Type, Metric: []*dto.Metric{m}})
			if h == nil {
				continue
			}
			s := at(label(m, "pod"))
			if s.ttft == nil {
				s.ttft = &Histogram{}
			}
			s.ttft.Add(h)
		}
	}
	return unrouted
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
