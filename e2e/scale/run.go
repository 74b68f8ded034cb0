package scale

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Config configures one measured run: one layout on nodes that already exist.
type Config struct {
	Client     kubernetes.Interface
	Scraper    *Scraper
	Pids       map[string]int // process name -> pid, sampled for CPU and memory
	RunID      string
	Namespace  string
	Nodes      []*corev1.Node
	Layout     Layout
	GPUProfile string // driver NVML mock profile, e.g. "dgxh100"
	Mix        Mix
	Image      string
	// Classes maps the standard DeviceClass names to the ones claims use (EnsureDeviceClasses).
	Classes map[string]string
	// PhaseTimeout bounds the wait for one phase's pods to be bound.
	PhaseTimeout time.Duration
	// VerifyNodes is how many nodes with allocations have their counters checked in full.
	VerifyNodes int
}

// Stats are latency quantiles and a count.
type Stats struct {
	N        int
	P50, P99 float64 // seconds
}

// PhaseResult is what one kind's phase measured.
type PhaseResult struct {
	Kind          Kind
	Pods          int
	Bound         int
	Wall          time.Duration // first create to last bound
	PodsPerSec    float64
	E2E           Stats // pod create to bound, observed by watch
	Attempt       Stats // scheduler_scheduling_attempt_duration_seconds{result="scheduled"}
	Algorithm     Stats
	DRAFilter     Stats   // plugin DynamicResources, extension point Filter (sampled by the scheduler)
	Unschedulable float64 // unschedulable attempts during the phase (retries)
}

// RunResult is what one layout measured.
type RunResult struct {
	Layout string
	// Profiles are the MIG profiles the layout published (the demand, for a demand layout).
	Profiles                                          []string
	Nodes                                             int
	SlicesPerNode, DevicesPerNode, CounterSetsPerNode int
	PublishTime                                       time.Duration
	Phases                                            []PhaseResult
	Usage                                             map[string]ProcUsage
	Verify                                            VerifyResult
}

// Phase returns the result of kind k.
func (r RunResult) Phase(k Kind) (PhaseResult, bool) {
	for _, p := range r.Phases {
		if p.Kind == k {
			return p, true
		}
	}
	return PhaseResult{}, false
}

// Run publishes the layout's slices on the nodes, runs one phase per kind (claims pre-created, then
// pods created as fast as the client allows), verifies allocations and returns the measurements. The
// caller owns cleanup of the namespace and slices (Cleanup), so an interrupted run leaves nothing.
func Run(ctx context.Context, cfg Config) (RunResult, error) {
	logger := klog.FromContext(ctx).WithValues("layout", cfg.Layout.Name, "nodes", len(cfg.Nodes))
	res := RunResult{Layout: cfg.Layout.Name, Nodes: len(cfg.Nodes)}
	cs := cfg.Client
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cfg.Namespace, Labels: runLabels(cfg.RunID)}}, metav1.CreateOptions{}); err != nil {
		return res, fmt.Errorf("namespace %s: %w", cfg.Namespace, err)
	}
	if cfg.Layout.Demand {
		profiles, err := DemandProfiles(ctx, cs, cfg)
		if err != nil {
			return res, fmt.Errorf("demand-shaped layout: %w", err)
		}
		cfg.Layout.Options.Profiles = profiles
		logger.Info("MIG profiles in demand", "profiles", profiles)
	}
	res.Profiles = cfg.Layout.Options.Profiles
	start := time.Now()
	per, err := PublishSlices(ctx, cs, cfg.Nodes, cfg.GPUProfile, cfg.Layout, cfg.RunID)
	if err != nil {
		return res, err
	}
	res.SlicesPerNode, res.DevicesPerNode, res.CounterSetsPerNode = per[0], per[1], per[2]
	res.PublishTime = time.Since(start)
	logger.Info("Published slices", "perNode", per, "duration", res.PublishTime)
	// Give the scheduler's informers time to take in the slices before measuring.
	time.Sleep(3 * time.Second)

	bound := newBindWatch(ctx, cs, cfg.Namespace)
	defer bound.stop()

	sampler := NewSampler("/proc", cfg.Pids, 500*time.Millisecond)
	sampler.Start()
	for _, k := range Kinds {
		n := cfg.Mix[k]
		if n == 0 {
			continue
		}
		pr, err := runPhase(ctx, cfg, bound, k, n)
		res.Phases = append(res.Phases, pr)
		if err != nil {
			res.Usage = sampler.Stop()
			return res, err
		}
		logger.Info("Phase done", "kind", k, "pods", n, "podsPerSec", fmt.Sprintf("%.1f", pr.PodsPerSec),
			"attemptP99ms", fmt.Sprintf("%.1f", pr.Attempt.P99*1000))
	}
	res.Usage = sampler.Stop()
	res.Verify, err = Verify(ctx, cs, cfg.Namespace, cfg.Layout, cfg.GPUProfile, cfg.VerifyNodes)
	return res, err
}

func runPhase(ctx context.Context, cfg Config, bound *bindWatch, k Kind, n int) (PhaseResult, error) {
	cs := cfg.Client
	pr := PhaseResult{Kind: k, Pods: n}
	name := func(i int) string { return fmt.Sprintf("%s-%d", k, i) }
	err := parallel(ctx, n, 32, func(ctx context.Context, i int) error {
		_, err := cs.ResourceV1().ResourceClaims(cfg.Namespace).Create(ctx, LayoutClaim(name(i), cfg.RunID, k, cfg.Layout, cfg.Classes), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("claim %s: %w", name(i), err)
		}
		return nil
	})
	if err != nil {
		return pr, err
	}
	before, err := cfg.Scraper.Scrape(ctx)
	if err != nil {
		return pr, err
	}
	created := make([]time.Time, n)
	start := time.Now()
	err = parallel(ctx, n, 32, func(ctx context.Context, i int) error {
		created[i] = time.Now()
		if _, err := cs.CoreV1().Pods(cfg.Namespace).Create(ctx, Pod(name(i), cfg.RunID, k, cfg.Image), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("pod %s: %w", name(i), err)
		}
		return nil
	})
	if err != nil {
		return pr, err
	}
	waitErr := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, cfg.PhaseTimeout, true, func(context.Context) (bool, error) {
		return boundCount(bound, name, n) == n, nil
	})
	after, err := settledScrape(ctx, cfg.Scraper, before, boundCount(bound, name, n))
	if err != nil {
		return pr, err
	}
	var lat []float64
	var last time.Time
	for i := 0; i < n; i++ {
		if t, ok := bound.get(name(i)); ok {
			pr.Bound++
			lat = append(lat, t.Sub(created[i]).Seconds())
			if t.After(last) {
				last = t
			}
		}
	}
	pr.E2E = sampleStats(lat)
	if pr.Bound > 0 {
		pr.Wall = last.Sub(start)
		pr.PodsPerSec = float64(pr.Bound) / pr.Wall.Seconds()
	}
	pr.Attempt = histStats(after.Histogram(MetricAttempt, map[string]string{"result": "scheduled"}).Sub(before.Histogram(MetricAttempt, map[string]string{"result": "scheduled"})))
	pr.Algorithm = histStats(after.Histogram(MetricAlgorithm, nil).Sub(before.Histogram(MetricAlgorithm, nil)))
	dra := map[string]string{"plugin": "DynamicResources", "extension_point": "Filter"}
	pr.DRAFilter = histStats(after.Histogram(MetricPlugin, dra).Sub(before.Histogram(MetricPlugin, dra)))
	unsched := map[string]string{"result": "unschedulable"}
	pr.Unschedulable = after.Counter(MetricAttempts, unsched) - before.Counter(MetricAttempts, unsched)
	if waitErr != nil {
		return pr, fmt.Errorf("phase %s: %d of %d pods bound within %s (%s): %w", k, pr.Bound, n, cfg.PhaseTimeout, pendingReason(ctx, cs, cfg.Namespace, bound, name, n), waitErr)
	}
	return pr, nil
}

// metricsSettle bounds how long settledScrape waits for the scheduler's histograms to catch up.
const metricsSettle = 10 * time.Second

// boundCount returns how many of the phase's n pods the watch has seen bound.
func boundCount(bound *bindWatch, name func(int) string, n int) int {
	c := 0
	for i := 0; i < n; i++ {
		if _, ok := bound.get(name(i)); ok {
			c++
		}
	}
	return c
}

// settledScrape scrapes the scheduler until its scheduled-attempt histogram has counted at least
// want attempts since before, or metricsSettle has passed. The scheduler records an attempt only
// after its binding cycle returns, which can be later than the moment the API server shows the pod
// bound, so one scrape right after the last binding can miss the last attempts.
func settledScrape(ctx context.Context, s *Scraper, before Families, want int) (Families, error) {
	scheduled := map[string]string{"result": "scheduled"}
	deadline := time.Now().Add(metricsSettle)
	for {
		after, err := s.Scrape(ctx)
		if err != nil {
			return nil, err
		}
		got := after.Histogram(MetricAttempt, scheduled).Sub(before.Histogram(MetricAttempt, scheduled))
		if int(got.Count) >= want || time.Now().After(deadline) {
			return after, nil
		}
		select {
		case <-ctx.Done():
			return after, nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// pendingReason returns the scheduler's message on the first pod of the phase that is not bound.
func pendingReason(ctx context.Context, cs kubernetes.Interface, ns string, bound *bindWatch, name func(int) string, n int) string {
	for i := 0; i < n; i++ {
		if _, ok := bound.get(name(i)); ok {
			continue
		}
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name(i), metav1.GetOptions{})
		if err != nil {
			return fmt.Sprintf("pod %s: %v", name(i), err)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				return fmt.Sprintf("pod %s: %s: %s", p.Name, c.Reason, c.Message)
			}
		}
		return fmt.Sprintf("pod %s: no PodScheduled condition", p.Name)
	}
	return "every pod bound"
}

func histStats(h Histogram) Stats {
	return Stats{N: int(h.Count), P50: h.Quantile(0.5), P99: h.Quantile(0.99)}
}

// sampleStats returns nearest-rank quantiles of samples (NaN when empty).
func sampleStats(s []float64) Stats {
	if len(s) == 0 {
		return Stats{P50: math.NaN(), P99: math.NaN()}
	}
	s = append([]float64(nil), s...)
	sort.Float64s(s)
	q := func(q float64) float64 { return s[min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1)] }
	return Stats{N: len(s), P50: q(0.5), P99: q(0.99)}
}

// bindWatch records when each pod of a namespace was first seen bound to a node.
type bindWatch struct {
	mu     sync.Mutex
	bound  map[string]time.Time
	cancel context.CancelFunc
}

func newBindWatch(ctx context.Context, cs kubernetes.Interface, ns string) *bindWatch {
	ctx, cancel := context.WithCancel(ctx)
	b := &bindWatch{bound: map[string]time.Time{}, cancel: cancel}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	see := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			now := time.Now()
			b.mu.Lock()
			if _, seen := b.bound[p.Name]; !seen {
				b.bound[p.Name] = now
			}
			b.mu.Unlock()
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, n any) { see(n) }})
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return b
}

func (b *bindWatch) get(name string) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.bound[name]
	return t, ok
}

func (b *bindWatch) stop() { b.cancel() }
