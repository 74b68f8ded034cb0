package scale

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// MetricPodGroupAttempt is the scheduler's pod-group scheduling attempt latency (GenericWorkload).
const MetricPodGroupAttempt = "scheduler_podgroup_scheduling_attempt_duration_seconds"

// GangConfig configures the gang phase on nodes that already exist (with no slices yet).
type GangConfig struct {
	Client     kubernetes.Interface
	Scraper    *Scraper
	RunID      string
	Nodes      []*corev1.Node
	GPUProfile string
	Image      string
	Classes    map[string]string
	// Singles is how many ungrouped pods (the gang shapes' pods in turn) are placed first, alone,
	// as the single-pod baseline; Overcommit is the gangs' GPUs over the cluster's.
	Singles    int
	Overcommit float64
	// Timeout bounds each phase; Settle is how long no pod may be newly bound before the gang
	// phase's final state is judged.
	Timeout, Settle time.Duration
}

// GangResult is what the gang phase measured.
type GangResult struct {
	Nodes, GPUs, WantedGPUs, GangPods int
	Judgement                         GangJudgement
	// SingleE2E and GangE2E are create-to-bound latencies: of each single pod, and of each whole
	// gang from its last pod's creation to its last pod's binding.
	SingleE2E, GangE2E Stats
	// SingleAttempt and GangAttempt are the scheduler's own attempt latencies (pods; pod groups).
	SingleAttempt, GangAttempt Stats
	// BindSpread is the longest time between a whole gang's first and last pod binding (the
	// scheduler decides a gang at once and binds its pods one by one).
	BindSpread time.Duration
	// Settled is how long the gang phase ran from its first creation until Settle passed
	// without a new binding (Settle included); Unsettled is true when Timeout ended it first.
	Settled, Settle time.Duration
	Unsettled       bool
	Wall            time.Duration
}

// gangObjects returns gang g's PodGroup (as the controller writes it: gang minCount, disruption
// mode all) and its pods with their claims.
func gangObjects(ns, runID, image, g string, s GangShape, classes map[string]string) (*schedv1beta1.PodGroup, []*resourceapi.ResourceClaim, []*corev1.Pod) {
	pg := &schedv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: g, Namespace: ns, Labels: runLabels(runID, "shape", s.Name)},
		Spec: schedv1beta1.PodGroupSpec{
			SchedulingPolicy: schedv1beta1.PodGroupSchedulingPolicy{Gang: &schedv1beta1.GangSchedulingPolicy{MinCount: int32(s.Size)}},
			DisruptionMode:   &schedv1beta1.DisruptionMode{All: &schedv1beta1.AllDisruptionMode{}},
		},
	}
	var claims []*resourceapi.ResourceClaim
	var pods []*corev1.Pod
	for j := 0; j < s.Size; j++ {
		name := fmt.Sprintf("%s-%d", g, j)
		claims = append(claims, gpuClaim(name, runID, s.GPUs, classes))
		p := Pod(name, runID, KindWhole, image)
		p.Labels["gang"] = g
		if g != "" {
			p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(g)}
		}
		pods = append(pods, p)
	}
	return pg, claims, pods
}

// gpuClaim is a claim of n whole GPUs.
func gpuClaim(name, runID string, n int, classes map[string]string) *resourceapi.ResourceClaim {
	c := Claim(name, runID, KindWhole, false, classes)
	c.Spec.Devices.Requests[0].Exactly.Count = int64(n)
	return c
}

// RunGangs publishes whole-GPU slices on the nodes, places the single-pod baseline and deletes
// it, then creates GangMix's gangs at once and judges the settled state. Namespaces are
// ns+"-single" and ns+"-gang"; the caller deletes the slices.
func RunGangs(ctx context.Context, cfg GangConfig, ns string) (GangResult, error) {
	logger := klog.FromContext(ctx).WithValues("nodes", len(cfg.Nodes))
	cs := cfg.Client
	res := GangResult{Nodes: len(cfg.Nodes), GPUs: 8 * len(cfg.Nodes), Settle: cfg.Settle}
	whole, _ := LayoutByName(LayoutWhole)
	if _, err := PublishSlices(ctx, cs, cfg.Nodes, cfg.GPUProfile, whole, cfg.RunID); err != nil {
		return res, err
	}
	time.Sleep(3 * time.Second) // the scheduler's informers take in the slices
	start := time.Now()
	if err := runSingles(ctx, cfg, ns+"-single", &res); err != nil {
		return res, err
	}
	logger.Info("Single-pod baseline done", "pods", cfg.Singles, "e2eP99", res.SingleE2E.P99)
	err := runGangPhase(ctx, cfg, ns+"-gang", &res)
	res.Wall = time.Since(start)
	return res, err
}

func createNamespace(ctx context.Context, cs kubernetes.Interface, ns, runID string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: runLabels(runID)}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	return nil
}

func runSingles(ctx context.Context, cfg GangConfig, ns string, res *GangResult) error {
	cs := cfg.Client
	if err := createNamespace(ctx, cs, ns, cfg.RunID); err != nil {
		return err
	}
	var claims []*resourceapi.ResourceClaim
	var pods []*corev1.Pod
	for i := 0; i < cfg.Singles; i++ {
		_, c, p := gangObjects(ns, cfg.RunID, cfg.Image, "", GangShapes[i%len(GangShapes)], cfg.Classes)
		c[0].Name, p[0].Name = fmt.Sprintf("single-%d", i), fmt.Sprintf("single-%d", i)
		p[0].Spec.ResourceClaims[0].ResourceClaimName = ptr.To(c[0].Name)
		claims, pods = append(claims, c[0]), append(pods, p[0])
	}
	bound := newBindWatch(ctx, cs, ns)
	defer bound.stop()
	created, before, err := createAll(ctx, cfg, ns, nil, claims, pods)
	if err != nil {
		return err
	}
	waitErr := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, cfg.Timeout, true, func(context.Context) (bool, error) {
		return boundCount(bound, func(i int) string { return pods[i].Name }, len(pods)) == len(pods), nil
	})
	after, err := settledScrape(ctx, cfg.Scraper, before, len(pods))
	if err != nil {
		return err
	}
	var lat []float64
	for _, p := range pods {
		if t, ok := bound.get(p.Name); ok {
			lat = append(lat, t.Sub(created[p.Name]).Seconds())
		}
	}
	res.SingleE2E = sampleStats(lat)
	sched := map[string]string{"result": "scheduled"}
	res.SingleAttempt = histStats(after.Histogram(MetricAttempt, sched).Sub(before.Histogram(MetricAttempt, sched)))
	if waitErr != nil {
		return fmt.Errorf("single-pod baseline: %d of %d bound within %s: %w", len(lat), len(pods), cfg.Timeout, waitErr)
	}
	return DeleteNamespace(ctx, cs, ns)
}

// createAll creates the PodGroups, then the claims, then the pods (32 at a time), recording each
// pod's creation time, and returns the scheduler's metrics from before the first pod.
func createAll(ctx context.Context, cfg GangConfig, ns string, pgs []*schedv1beta1.PodGroup, claims []*resourceapi.ResourceClaim, pods []*corev1.Pod) (map[string]time.Time, Families, error) {
	cs := cfg.Client
	err := parallel(ctx, len(pgs), 32, func(ctx context.Context, i int) error {
		if _, err := cs.SchedulingV1beta1().PodGroups(ns).Create(ctx, pgs[i], metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("podgroup %s (the cluster needs GenericWorkload and scheduling.k8s.io/v1beta1): %w", pgs[i].Name, err)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	err = parallel(ctx, len(claims), 32, func(ctx context.Context, i int) error {
		if _, err := cs.ResourceV1().ResourceClaims(ns).Create(ctx, claims[i], metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("claim %s: %w", claims[i].Name, err)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	before, err := cfg.Scraper.Scrape(ctx)
	if err != nil {
		return nil, nil, err
	}
	times := make([]time.Time, len(pods))
	err = parallel(ctx, len(pods), 32, func(ctx context.Context, i int) error {
		times[i] = time.Now()
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pods[i], metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("pod %s: %w", pods[i].Name, err)
		}
		return nil
	})
	created := map[string]time.Time{}
	for i, p := range pods {
		created[p.Name] = times[i]
	}
	return created, before, err
}
