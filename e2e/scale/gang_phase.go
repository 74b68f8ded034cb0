package scale

import (
	"context"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// runGangPhase creates GangMix's gangs at once, waits until no pod was newly bound for
// cfg.Settle (or cfg.Timeout), and judges the final pods and claims.
func runGangPhase(ctx context.Context, cfg GangConfig, ns string, res *GangResult) error {
	cs := cfg.Client
	if err := createNamespace(ctx, cs, ns, cfg.RunID); err != nil {
		return err
	}
	mix := GangMix(len(cfg.Nodes), 8, cfg.Overcommit)
	shapes := map[string]GangShape{}
	var pgs []*schedv1beta1.PodGroup
	var claims []*resourceapi.ResourceClaim
	var pods []*corev1.Pod
	for i, s := range mix {
		g := fmt.Sprintf("g%d-%s", i, s.Name)
		shapes[g] = s
		pg, c, p := gangObjects(ns, cfg.RunID, cfg.Image, g, s, cfg.Classes)
		pgs, claims, pods = append(pgs, pg), append(claims, c...), append(pods, p...)
		res.WantedGPUs += s.Size * s.GPUs
	}
	res.GangPods = len(pods)
	bound := newBindWatch(ctx, cs, ns)
	defer bound.stop()
	start := time.Now()
	created, before, err := createAll(ctx, cfg, ns, pgs, claims, pods)
	if err != nil {
		return err
	}
	names := func(i int) string { return pods[i].Name }
	last, lastN := time.Now(), 0
	deadline := time.Now().Add(cfg.Timeout)
	for time.Since(last) < cfg.Settle {
		if time.Now().After(deadline) {
			res.Unsettled = true // judged anyway: the scheduler was still binding
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		if n := boundCount(bound, names, len(pods)); n != lastN {
			last, lastN = time.Now(), n
		}
	}
	res.Settled = time.Since(start).Round(time.Millisecond)
	after, err := cfg.Scraper.Scrape(ctx)
	if err != nil {
		return err
	}
	sched := map[string]string{"result": "scheduled"}
	res.GangAttempt = histStats(after.Histogram(MetricPodGroupAttempt, sched).Sub(before.Histogram(MetricPodGroupAttempt, sched)))

	// Gang latency: from the gang's last pod created to its last pod bound.
	lastCreated, firstBound, lastBound, nBound := map[string]time.Time{}, map[string]time.Time{}, map[string]time.Time{}, map[string]int{}
	for _, p := range pods {
		g := p.Labels["gang"]
		if c := created[p.Name]; c.After(lastCreated[g]) {
			lastCreated[g] = c
		}
		if t, ok := bound.get(p.Name); ok {
			nBound[g]++
			if t.After(lastBound[g]) {
				lastBound[g] = t
			}
			if firstBound[g].IsZero() || t.Before(firstBound[g]) {
				firstBound[g] = t
			}
		}
	}
	var lat []float64
	for g, s := range shapes {
		if nBound[g] == s.Size {
			lat = append(lat, lastBound[g].Sub(lastCreated[g]).Seconds())
			res.BindSpread = max(res.BindSpread, lastBound[g].Sub(firstBound[g]))
		}
	}
	res.GangE2E = sampleStats(lat)

	final, err := gangFinalState(ctx, cfg, ns)
	if err != nil {
		return err
	}
	nodes := make([]string, len(cfg.Nodes))
	for i, n := range cfg.Nodes {
		nodes[i] = n.Name
	}
	res.Judgement = JudgeGangs(final, shapes, nodes, 8)
	return nil
}

// gangFinalState reads every pod (node) and claim (allocated GPUs) of the gang namespace.
func gangFinalState(ctx context.Context, cfg GangConfig, ns string) (map[string]GangPod, error) {
	pl, err := cfg.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing gang pods: %w", err)
	}
	cl, err := cfg.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing gang claims: %w", err)
	}
	out := map[string]GangPod{}
	for _, c := range cl.Items {
		gp := GangPod{Want: int(c.Spec.Devices.Requests[0].Exactly.Count)}
		if c.Status.Allocation != nil {
			gp.Holds = len(c.Status.Allocation.Devices.Results)
		}
		out[c.Name] = gp
	}
	for _, p := range pl.Items {
		gp, ok := out[p.Name]
		gp.Gang, gp.Node, gp.ClaimMissing = p.Labels["gang"], p.Spec.NodeName, !ok
		out[p.Name] = gp
	}
	return out, nil
}

// TargetGangs: 0 gangs bound in part, 0 GPUs stranded and 0 pending gangs that the free GPUs hold.
const TargetGangs = 0

// WriteGangs prints the gang phase's table and returns its verdict line and whether it passed.
func WriteGangs(w io.Writer, r GangResult) (string, bool) {
	j := r.Judgement
	fmt.Fprintf(w, "\ngangs at %d nodes (%d GPUs; %d gangs of %v wanting %d GPUs, %.2fx; %d pods):\n",
		r.Nodes, r.GPUs, j.Gangs, GangShapes, r.WantedGPUs, float64(r.WantedGPUs)/float64(max(r.GPUs, 1)), r.GangPods)
	fmt.Fprintf(w, "  whole %d, pending %d, bound in part %d, stranded GPUs %d, pending gangs the free GPUs hold %d, GPUs bound %d of %d (%.1f%%)\n",
		j.Whole, j.Pending, j.Partial, j.Stranded, j.Fittable, j.BoundGPUs, r.GPUs, 100*float64(j.BoundGPUs)/float64(max(r.GPUs, 1)))
	for _, p := range j.Problems {
		fmt.Fprintf(w, "  problem: %s\n", p)
	}
	fmt.Fprintf(w, "  %-34s %8s %10s %10s\n", "placement latency (ms)", "n", "p50", "p99")
	row := func(name string, s Stats) { fmt.Fprintf(w, "  %-34s %8d %10s %10s\n", name, s.N, ms(s.P50), ms(s.P99)) }
	row("single pod, create->bound", r.SingleE2E)
	row("whole gang, last create->last bound", r.GangE2E)
	row("scheduler attempt, single pod", r.SingleAttempt)
	row("scheduler attempt, pod group", r.GangAttempt)
	fmt.Fprintf(w, "  gang p99 / single p99 (create->bound): %.2fx; longest bind spread of a gang %s; gang phase settled after %s (last binding + %s quiet); both phases %s\n",
		ratio(r.GangE2E.P99, r.SingleE2E.P99), r.BindSpread.Round(time.Millisecond), r.Settled, r.Settle, r.Wall.Round(time.Second))
	if r.Unsettled {
		fmt.Fprintf(w, "  NOT SETTLED: pods were still being bound when the phase timeout ended it; judged as it stood\n")
	}
	ok := j.Partial == TargetGangs && j.Stranded == TargetGangs && j.Fittable == TargetGangs && j.Whole > 0 && !r.Unsettled
	return fmt.Sprintf("gang bench: %s at %d nodes: %d gangs bound in part, %d GPUs stranded, %d pending gangs that fit (target 0, 0, 0; %d of %d gangs whole); gang placement p99 %s ms beside single-pod %s ms",
		passFail(ok), r.Nodes, j.Partial, j.Stranded, j.Fittable, j.Whole, j.Gangs, ms(r.GangE2E.P99), ms(r.SingleE2E.P99)), ok
}
