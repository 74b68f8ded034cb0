package scaleloop

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/scalepolicy"
	"github.com/neuronetes/neuronetes/gateway/poolview"
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
	queue float64
	ttft  *Histogram
}

// Overlay replaces, in samples (by agent pod), the fields the gateway measures with the sum over
// the gateway's replicas; tokens waiting in the gateway before a pod was chosen are spread over
// the pods. Pods the gateway does not report keep their own values. A failure leaves samples
// as they are. It returns each answering gateway replica's offered-prompt-token counter (by
// gateway pod name; nil when none exported it), which OfferedRate turns into the offered demand.
func (g *GatewaySource) Overlay(ctx context.Context, pool *v1alpha1.AgentPool, samples map[string]PodSample) map[string]float64 {
	gw, err := g.read(ctx, pool)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Gateway metrics unavailable; using the pods' own", "err", err)
		return nil
	}
	if len(samples) == 0 {
		return gw.offered
	}
	spread := gw.unrouted / float64(len(samples))
	for name, s := range samples {
		v, ok := gw.pods[name]
		if !ok {
			continue
		}
		s.TokensInQueue = v.queue + spread
		s.Sessions = gw.sessions.Pod(name)
		if v.ttft != nil {
			s.TTFT = v.ttft
		}
		samples[name] = s
	}
	return gw.offered
}

// gatewayView is a pool's view summed over the gateway replicas that answered.
type gatewayView struct {
	pods     map[string]*gatewaySample // every pod some replica reported
	sessions poolview.SessionCount
	unrouted float64            // tokens waiting before a pod was chosen
	offered  map[string]float64 // offered-token counter by gateway pod (nil: none exported)
}

// read scrapes every ready gateway replica and sums their views of pool.
func (g *GatewaySource) read(ctx context.Context, pool *v1alpha1.AgentPool) (*gatewayView, error) {
	pods, err := g.gatewayPods(ctx)
	if err != nil {
		return nil, err
	}
	c := g.HTTP
	if c == nil {
		c = &http.Client{Timeout: 3 * time.Second}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	view := &gatewayView{pods: map[string]*gatewaySample{}}
	answered := 0
	for i := range pods {
		p := &pods[i]
		if p.Status.PodIP == "" || !podReady(p) || !p.DeletionTimestamp.IsZero() {
			continue
		}
		url := "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(g.Port)) + poolview.Path(pool.Namespace, pool.Name)
		wg.Go(func() {
			fams, err := poolview.Scrape(ctx, c, url)
			if err != nil {
				klog.FromContext(ctx).V(3).Info("Gateway replica scrape failed", "pod", p.Name, "err", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			answered++
			view.merge(fams)
			if v, ok := offeredTokens(fams); ok {
				if view.offered == nil {
					view.offered = map[string]float64{}
				}
				view.offered[p.Name] = v
			}
		})
	}
	wg.Wait()
	if answered == 0 {
		return nil, fmt.Errorf("no gateway replica answered for pool %s/%s (selector %s in %s)", pool.Namespace, pool.Name, g.Selector, g.Namespace)
	}
	for _, pod := range view.sessions.Pods() {
		view.pod(pod)
	}
	return view, nil
}

// offeredTokens is one gateway replica's counter of prompt tokens counted at arrival at the pool.
func offeredTokens(fams poolview.Families) (float64, bool) {
	f := fams[poolview.OfferedTokens]
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

func (v *gatewayView) pod(name string) *gatewaySample {
	s := v.pods[name]
	if s == nil {
		s = &gatewaySample{}
		v.pods[name] = s
	}
	return s
}

// merge adds one replica's page into v.
func (v *gatewayView) merge(fams poolview.Families) {
	for _, m := range fams[poolview.TokensInQueue].GetMetric() {
		pod, q := poolview.Label(m, "pod"), m.GetGauge().GetValue()
		if pod == "" {
			v.unrouted += q
			continue
		}
		v.pod(pod).queue += q
	}
	v.sessions.Add(fams)
	if f := fams[poolview.TTFT]; f != nil {
		for _, m := range f.GetMetric() {
			h := histogram(&dto.MetricFamily{Type: f.Type, Metric: []*dto.Metric{m}})
			if h == nil {
				continue
			}
			s := v.pod(poolview.Label(m, "pod"))
			if s.ttft == nil {
				s.ttft = &Histogram{}
			}
			s.ttft.Add(h)
		}
	}
}
