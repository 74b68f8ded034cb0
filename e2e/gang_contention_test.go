package e2e

// Gangs under contention (issue 33 item 4) on the local cluster's kube-scheduler with the Workload
// API: gangs wanting more GPUs than the nodes have are each bound whole or Pending whole, and a
// gang of a higher PriorityClass preempts a lower gang whole (the scheduler's PodGroup preemption
// with the PodGroups' disruptionMode all), not single pods.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/controller/agentpool"
	"github.com/neuronetes/neuronetes/e2e/scale"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// contendedClassYAML is one gang pool of 1 replica: %[2]d pods of 1 gangGPU each, of
// PriorityClass %[3]s, on the nodes labelled for namespace %[4]s.
const contendedClassYAML = `apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata:
  name: %[1]s
spec:
  gang: {size: %[2]d}
  template:
    spec:
      priorityClassName: %[3]s
      nodeSelector: {neuronetes.io/e2e-gang: "%[4]s"}
      tolerations:
      - {key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}
      containers:
      - name: agent
        image: neuronetes.local/never-pulled:dev
        resources:
          limits: {"e2e.neuronetes.io/gpu": "1"}
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata:
  name: %[1]s
spec:
  replicas: 1
  minReplicas: 1
  maxReplicas: 1
  prewarmPercent: 0
  drainGracePeriodSeconds: 1
`

// gangState is one sample of the gangs of a namespace: per gang (PodGroup name), its live pods and
// those of them bound; gangs with a pod being deleted (evicted, torn down) are in tearing.
type gangState struct {
	live, bound map[string]int
	tearing     map[string]bool
	uids        map[string][]string // bound pods' UIDs per gang, sorted
}

func sampleGangs(t *testing.T, e *Env, ns string) gangState {
	t.Helper()
	l, err := e.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: agentpool.GangLabel})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	s := gangState{live: map[string]int{}, bound: map[string]int{}, tearing: map[string]bool{}, uids: map[string][]string{}}
	for _, p := range l.Items {
		g := p.Labels[agentpool.GangLabel]
		if p.DeletionTimestamp != nil {
			s.tearing[g] = true
			continue
		}
		s.live[g]++
		if p.Spec.NodeName != "" {
			s.bound[g]++
			s.uids[g] = append(s.uids[g], string(p.UID))
		}
	}
	for g := range s.uids {
		sort.Strings(s.uids[g])
	}
	return s
}

// partial names the gangs bound in part (some but not all of size pods on nodes) that are not
// being torn down: a pending gang holding GPUs.
func (s gangState) partial(size map[string]int) []string {
	var out []string
	for g, b := range s.bound {
		if b != 0 && b != size[g] && !s.tearing[g] {
			out = append(out, fmt.Sprintf("%s %d/%d", g, b, size[g]))
		}
	}
	return out
}

// whole lists the gangs with all size pods bound.
func (s gangState) whole(size map[string]int) []string {
	var out []string
	for g, b := range s.bound {
		if b == size[g] {
			out = append(out, g)
		}
	}
	sort.Strings(out)
	return out
}

// bindSpread bounds how long a gang may be seen bound in part: the scheduler decides a gang whole
// and then binds its pods one by one, so a sample can fall between two bindings; a gang still in
// part after this is holding GPUs while pending.
const bindSpread = 5 * time.Second

// watchGangs samples every 500 ms for at most d, fails on any gang bound in part for longer than
// bindSpread, and returns the last sample once done reports true (or d is over, when done is nil),
// the number of samples and the longest time a gang was seen bound in part.
func watchGangs(t *testing.T, e *Env, ns string, d time.Duration, size map[string]int, done func(gangState) bool) (gangState, int, time.Duration) {
	t.Helper()
	samples := 0
	var s gangState
	since := map[string]time.Time{}
	var longest time.Duration
	for end := time.Now().Add(d); ; time.Sleep(500 * time.Millisecond) {
		s = sampleGangs(t, e, ns)
		samples++
		now := time.Now()
		seen := map[string]bool{}
		for _, p := range s.partial(size) {
			g := strings.Fields(p)[0]
			seen[g] = true
			if since[g].IsZero() {
				since[g] = now
			}
			if w := now.Sub(since[g]); w > longest {
				longest = w
			}
			if now.Sub(since[g]) > bindSpread {
				t.Fatalf("sample %d: gang bound in part for %s (a pending gang holding GPUs): %s", samples, now.Sub(since[g]).Round(time.Millisecond), p)
			}
		}
		for g := range since {
			if !seen[g] {
				delete(since, g)
			}
		}
		if (done != nil && done(s)) || now.After(end) {
			return s, samples, longest
		}
	}
}

// TestGangContentionOnKwok: on 2 kwok nodes of 4 GPUs (8), three low-priority gangs of 3 (9 GPUs
// wanted) end with exactly 2 bound whole and 1 Pending whole (never one bound in part, no
// deadlock); then a high-priority gang of 4 (2 GPUs free) preempts exactly one low gang, all 3 of
// its pods (the scheduler's Preempted events name only pods of that gang; a pod the scheduler had
// not reached yet when the controller saw the gang broken is removed by the controller, so the
// events may name fewer than 3), and is bound whole, while the other bound low gang keeps its pods.
func TestGangContentionOnKwok(t *testing.T) {
	e := requireEnv(t)
	ctrlInstallCRDs(t, e)
	ns := e.Namespace(t, "ctrl-gangc")
	ctx := context.Background()
	runID := kwokRun(t, e)
	low, high := "nn-e2e-low-"+ns[len(ns)-5:], "nn-e2e-high-"+ns[len(ns)-5:]
	e.Apply(t, ns, fmt.Sprintf(`apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: %s}
value: 100
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: %s}
value: 1000
`, low, high))
	gangNodes(t, e, ns, runID, 2, 4)
	startController(t, e, ns, "neuronetes.local/never-pulled:dev", "", "--sidecar-keys-secret=", "--sidecar-redis-secret=")

	size := map[string]int{"l1-g0": 3, "l2-g0": 3, "l3-g0": 3, "h1-g0": 4}
	start := time.Now()
	for _, p := range []string{"l1", "l2", "l3"} {
		e.Apply(t, ns, fmt.Sprintf(contendedClassYAML, p, 3, low, ns))
	}
	twoBound := func(s gangState) bool { return len(s.whole(size)) == 2 }
	s, n, w1 := watchGangs(t, e, ns, 2*time.Minute, size, twoBound)
	if !twoBound(s) {
		t.Fatalf("after 2 min: whole gangs %v, bound %v, want 2 of the 3 low gangs (8 GPUs for 9 wanted)", s.whole(size), s.bound)
	}
	placed := time.Since(start)
	s, m, w2 := watchGangs(t, e, ns, 20*time.Second, size, nil)
	if w := s.whole(size); len(w) != 2 || s.bound["l1-g0"]+s.bound["l2-g0"]+s.bound["l3-g0"] != 6 {
		t.Fatalf("20 s later: whole gangs %v, bound %v, want the same 2 gangs and 6 pods", w, s.bound)
	}
	var pending string
	for _, g := range []string{"l1-g0", "l2-g0", "l3-g0"} {
		if s.bound[g] == 0 {
			pending = g
		}
	}
	t.Logf("contention: gangs %v bound whole %.1fs after the 3 pools were applied, %s Pending whole (%d live pods, 0 bound); %d samples, none bound in part for over %s (longest seen in part while binding: %s)",
		s.whole(size), placed.Seconds(), pending, s.live[pending], n+m, bindSpread, max(w1, w2))
	before := s.uids

	// A gang of the high class: 4 GPUs wanted, 2 free; one low gang (3 GPUs) must go, whole.
	hStart := time.Now()
	e.Apply(t, ns, fmt.Sprintf(contendedClassYAML, "h1", 4, high, ns))
	hBound := func(s gangState) bool { return s.bound["h1-g0"] == 4 }
	s, n, w1 = watchGangs(t, e, ns, 2*time.Minute, size, hBound)
	if !hBound(s) {
		t.Fatalf("after 2 min: high gang h1 bound %d of 4 (gangs %v)", s.bound["h1-g0"], s.bound)
	}
	t.Logf("preemption: high gang h1 bound whole %.1fs after it was applied (%d samples, none bound in part for over %s; longest seen in part: %s)", time.Since(hStart).Seconds(), n, bindSpread, w1)

	var victims, kept []string
	for g, uids := range before {
		same := strings.Join(s.uids[g], ",") == strings.Join(uids, ",")
		if same {
			kept = append(kept, g)
		} else {
			victims = append(victims, g)
		}
	}
	if len(victims) != 1 || len(kept) != 1 {
		t.Fatalf("low gangs preempted %v, kept %v: want exactly one preempted and one untouched", victims, kept)
	}
	// Every pod of the victim gang is gone: none of its pods before the preemption is left.
	for _, uid := range before[victims[0]] {
		if slices.Contains(s.uids[victims[0]], uid) {
			t.Errorf("victim gang %s kept pod %s (uids before %v, after %v): preempted in part", victims[0], uid, before[victims[0]], s.uids[victims[0]])
		}
	}
	// The scheduler names each pod it preempts in a Preempted event: at least one, and only pods
	// of the victim gang. The controller removes whatever the scheduler had not reached yet when
	// the gang was seen broken (planGang), and that leaves no Preempted event.
	var preempted []string
	Eventually(t, 30*time.Second, "a Preempted event for the victim gang", func() (bool, error) {
		evs, err := e.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Preempted"})
		if err != nil {
			return false, err
		}
		seen := map[string]bool{}
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Kind == "Pod" {
				seen[ev.InvolvedObject.Name] = true
			}
		}
		preempted = preempted[:0]
		for name := range seen {
			preempted = append(preempted, name)
		}
		sort.Strings(preempted)
		return len(preempted) >= 1, fmt.Errorf("preempted pods %v", preempted)
	})
	for _, name := range preempted {
		if !strings.HasPrefix(name, victims[0]+"-") {
			t.Errorf("pod %s preempted, not of the victim gang %s (preempted: %v)", name, victims[0], preempted)
		}
	}
	if len(preempted) > 3 {
		t.Errorf("preempted pods %v, more than the 3 of gang %s", preempted, victims[0])
	}
	// The evicted gang is recreated by its pool and waits whole: 1 GPU is left for 3 wanted.
	s, n, _ = watchGangs(t, e, ns, 20*time.Second, size, nil)
	if s.bound[victims[0]] != 0 || len(s.whole(size)) != 2 {
		t.Errorf("after preemption: bound %v, want %s Pending whole and h1 and %s bound", s.bound, victims[0], kept[0])
	}
	var pc []string
	for _, g := range []string{victims[0], "h1-g0"} {
		pc = append(pc, g+"="+e.Kubectl(t, "-n", ns, "get", "podgroups.scheduling.k8s.io", g,
			"-o", "jsonpath={.spec.priorityClassName}/{.spec.priority}/{.spec.disruptionMode}"))
	}
	t.Logf("preempted whole: gang %s (scheduler's Preempted events: %v; any other of its pods removed by the controller), kept %s; after: bound %v over %d samples; podgroups %v", victims[0], preempted, kept[0], s.bound, n, pc)
	checkGPUAccounting(t, e, ns)
}

// checkGPUAccounting fails when the bound gang pods ask for more of gangGPU on a node than it
// offers (the scheduler's accounting, checked from outside).
func checkGPUAccounting(t *testing.T, e *Env, ns string) {
	t.Helper()
	l, err := e.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]int64{}
	for _, p := range l.Items {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			continue
		}
		q := p.Spec.Containers[0].Resources.Limits[corev1.ResourceName(gangGPU)]
		used[p.Spec.NodeName] += q.Value()
	}
	for node, u := range used {
		if u > 4 {
			t.Errorf("node %s: %d GPUs bound, offers 4", node, u)
		}
	}
}

// TestGangTooLargeOnKwok: bad input the CRD cannot see. A kwok node publishes the driver's
// whole-GPU slice of dgxh100 (8 GPUs on one node); a gang of 3 pods × 4 GPUs on one node (12) gets
// the pool's Ready condition False, reason GangTooLarge, naming spec.gang.size, and no pod.
func TestGangTooLargeOnKwok(t *testing.T) {
	e := requireEnv(t)
	ctrlInstallCRDs(t, e)
	ns := e.Namespace(t, "ctrl-gangbig")
	ctx := context.Background()
	runID := kwokRun(t, e)
	nodes, err := scale.CreateNodes(ctx, e.Kube, runID, "nn-gangbig-"+ns[len(ns)-5:]+"-", 0, 1, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := scale.LayoutByName(scale.LayoutWhole)
	if _, err := scale.PublishSlices(ctx, e.Kube, nodes, "dgxh100", whole, runID); err != nil {
		t.Fatal(err)
	}
	startController(t, e, ns, "neuronetes.local/never-pulled:dev", "", "--sidecar-keys-secret=", "--sidecar-redis-secret=")
	e.Apply(t, ns, `apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: big}
spec:
  gpu: {count: 4}
  gang: {size: 3, topology: Node}
  template:
    spec:
      containers:
      - {name: agent, image: neuronetes.local/never-pulled:dev}
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: big}
spec: {replicas: 1, minReplicas: 1, maxReplicas: 1, prewarmPercent: 0}
`)
	var msg string
	Eventually(t, time.Minute, "pool big: Ready False GangTooLarge", func() (bool, error) {
		st, err := poolStatus(e, ns, "big")
		if err != nil {
			return false, err
		}
		conds, _ := st["conditions"].([]any)
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Ready" {
				msg, _ = m["message"].(string)
				return m["status"] == "False" && m["reason"] == "GangTooLarge", fmt.Errorf("Ready %v/%v: %v", m["status"], m["reason"], m["message"])
			}
		}
		return false, fmt.Errorf("no Ready condition in %v", st)
	})
	if !strings.Contains(msg, "spec.gang.size: 3 pods × spec.gpu.count 4 = 12 GPUs in one node") {
		t.Errorf("message %q does not name spec.gang.size and the 12 GPUs", msg)
	}
	if pods := poolPods(t, e, ns, "big")["serving"]; len(pods) != 0 {
		t.Errorf("%d pods created for a gang no node holds", len(pods))
	}
	t.Logf("refused as expected: %s", msg)
}
