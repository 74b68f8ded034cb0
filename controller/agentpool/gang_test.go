package agentpool

import (
	"context"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

func TestBuildPodGroup(t *testing.T) {
	pool := testPool(1)
	for _, tc := range []struct {
		name     string
		gang     nnv1.Gang
		priority string // the template's priorityClassName
		wantKey  string // "": no topology constraint
	}{
		{"no topology", nnv1.Gang{Size: 2}, "", ""},
		{"one node", nnv1.Gang{Size: 3, Topology: nnv1.GangTopologyNode}, "", HostnameTopologyKey},
		{"one NVLink domain is one node", nnv1.Gang{Size: 2, Topology: nnv1.GangTopologyNVLinkDomain}, "", HostnameTopologyKey},
		{"priority class from the template", nnv1.Gang{Size: 4}, "gang-high", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class := testClass(nil)
			class.Spec.Gang = &tc.gang
			class.Spec.Template.Spec.PriorityClassName = tc.priority
			pg := buildPodGroup(pool, "pool-g0", class)
			if pg.Name != "pool-g0" || pg.Namespace != "ns" || pg.Labels[nnv1.PoolLabel] != "pool" {
				t.Errorf("meta %s/%s labels %v", pg.Namespace, pg.Name, pg.Labels)
			}
			if g := pg.Spec.SchedulingPolicy.Gang; g == nil || g.MinCount != tc.gang.Size || pg.Spec.SchedulingPolicy.Basic != nil {
				t.Errorf("policy %+v, want gang minCount %d", pg.Spec.SchedulingPolicy, tc.gang.Size)
			}
			if ref := pg.Spec.WorkloadRef; ref == nil || ref.WorkloadName != "pool" || ref.TemplateName != GangTemplateName {
				t.Errorf("workloadRef %+v, want pool/%s", ref, GangTemplateName)
			}
			if dm := pg.Spec.DisruptionMode; dm == nil || dm.All == nil || dm.Single != nil {
				t.Errorf("disruptionMode %+v, want all (preempted whole)", dm)
			}
			if pg.Spec.PriorityClassName != tc.priority {
				t.Errorf("priorityClassName %q, want the template's %q", pg.Spec.PriorityClassName, tc.priority)
			}
			wl := buildWorkload(pool, class)
			if len(wl.Spec.PodGroupTemplates) != 1 || wl.Spec.PodGroupTemplates[0].Name != GangTemplateName ||
				wl.Spec.PodGroupTemplates[0].SchedulingPolicy.Gang.MinCount != tc.gang.Size || wl.Spec.ControllerRef.Kind != "AgentPool" ||
				wl.Spec.PodGroupTemplates[0].DisruptionMode == nil || wl.Spec.PodGroupTemplates[0].DisruptionMode.All == nil ||
				wl.Spec.PodGroupTemplates[0].PriorityClassName != tc.priority {
				t.Errorf("workload spec %+v", wl.Spec)
			}
			pod, err := buildGangPod(pool, "pool-g0", 0, podBuild{class: class})
			if err != nil || pod.Spec.PriorityClassName != tc.priority {
				t.Errorf("gang pod priorityClassName %q (%v), want %q as its PodGroup", pod.Spec.PriorityClassName, err, tc.priority)
			}
			key := ""
			if c := pg.Spec.SchedulingConstraints; c != nil && len(c.Topology) == 1 {
				key = c.Topology[0].Key
			}
			if key != tc.wantKey {
				t.Errorf("topology key %q, want %q", key, tc.wantKey)
			}
		})
	}
}

func TestBuildGangPod(t *testing.T) {
	class := testClass(&nnv1.GPURequest{Count: 2})
	pod, err := buildGangPod(testPool(1), "pool-g1", 1, podBuild{class: class, claimTemplate: "demo-gpu", drainGrace: 30})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Name != "pool-g1-1" || pod.Labels[GangLabel] != "pool-g1" || pod.Labels[nnv1.StateLabel] != nnv1.PodStateServing {
		t.Errorf("name %s labels %v", pod.Name, pod.Labels)
	}
	if sg := pod.Spec.SchedulingGroup; sg == nil || sg.PodGroupName == nil || *sg.PodGroupName != "pool-g1" {
		t.Errorf("schedulingGroup %+v, want podGroupName pool-g1", sg)
	}
	if len(pod.Spec.ResourceClaims) != 1 || *pod.Spec.ResourceClaims[0].ResourceClaimTemplateName != "demo-gpu" {
		t.Errorf("each gang pod keeps its own GPU claim: %+v", pod.Spec.ResourceClaims)
	}
}

func gpod(name, group string, ready bool, phase corev1.PodPhase, deleting bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}, Status: corev1.PodStatus{Phase: phase}}
	if group != "" {
		p.Labels[GangLabel] = group
	}
	if ready {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	if deleting {
		now := metav1.Now()
		p.DeletionTimestamp = &now
	}
	return p
}

func TestPlanGang(t *testing.T) {
	for _, tc := range []struct {
		name           string
		desired, size  int32
		pods           []*corev1.Pod
		create         map[string][]int
		remove         []string
		replicas, read int32
	}{
		{name: "empty pool creates every gang whole", desired: 2, size: 2,
			create: map[string][]int{"p-g0": {0, 1}, "p-g1": {0, 1}}},
		{name: "a gang is ready only when all its pods are", desired: 2, size: 2,
			pods: []*corev1.Pod{gpod("p-g0-0", "p-g0", true, "", false), gpod("p-g0-1", "p-g0", true, "", false),
				gpod("p-g1-0", "p-g1", true, "", false), gpod("p-g1-1", "p-g1", false, "", false)},
			create: map[string][]int{}, replicas: 2, read: 1},
		{name: "a missing pod is recreated in its gang", desired: 1, size: 3,
			pods:   []*corev1.Pod{gpod("p-g0-0", "p-g0", true, "", false), gpod("p-g0-2", "p-g0", true, "", false)},
			create: map[string][]int{"p-g0": {1}}, replicas: 1},
		{name: "scale-down removes the surplus gang whole", desired: 1, size: 2,
			pods: []*corev1.Pod{gpod("p-g0-0", "p-g0", true, "", false), gpod("p-g0-1", "p-g0", true, "", false),
				gpod("p-g1-0", "p-g1", true, "", false), gpod("p-g1-1", "p-g1", true, "", false)},
			create: map[string][]int{}, remove: []string{"p-g1"}, replicas: 1, read: 1},
		{name: "a failed pod replaces its gang whole, not in part", desired: 1, size: 2,
			pods:   []*corev1.Pod{gpod("p-g0-0", "p-g0", true, "", false), gpod("p-g0-1", "p-g0", false, corev1.PodFailed, false)},
			create: map[string][]int{}, remove: []string{"p-g0"}},
		{name: "a pod being deleted breaks its gang", desired: 1, size: 2,
			pods:   []*corev1.Pod{gpod("p-g0-0", "p-g0", true, "", true), gpod("p-g0-1", "p-g0", true, "", false)},
			create: map[string][]int{}, remove: []string{"p-g0"}},
		{name: "pods from before the pool was a gang pool are removed", desired: 1, size: 2,
			pods:   []*corev1.Pod{gpod("p-0", "", true, "", false)},
			create: map[string][]int{"p-g0": {0, 1}}, remove: []string{""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			byName := map[string]*corev1.Pod{}
			for _, p := range tc.pods {
				byName[p.Name] = p
			}
			plan := planGang("p", tc.desired, tc.size, byName)
			sort.Strings(plan.remove)
			if len(plan.create) != len(tc.create) {
				t.Errorf("create %v, want %v", plan.create, tc.create)
			}
			for g, idx := range tc.create {
				if !equalInts(plan.create[g], idx) {
					t.Errorf("create[%s] = %v, want %v", g, plan.create[g], idx)
				}
			}
			if !equalStrings(plan.remove, tc.remove) {
				t.Errorf("remove %v, want %v", plan.remove, tc.remove)
			}
			if plan.replicas != tc.replicas || plan.ready != tc.read {
				t.Errorf("replicas/ready %d/%d, want %d/%d", plan.replicas, plan.ready, tc.replicas, tc.read)
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestReconcileGangPool: a gang pool creates one PodGroup per replica and its pods, counts a
// replica Ready only when all its pods are, and scale-down removes a gang with its PodGroup.
func TestReconcileGangPool(t *testing.T) {
	class := testClass(nil)
	class.Spec.Gang = &nnv1.Gang{Size: 2, Topology: nnv1.GangTopologyNVLinkDomain}
	pool := testPool(2)
	pool.Spec.PrewarmPercent = nil
	pool.Spec.MinReplicas = ptrInt32(1)
	h := newHarness(t, class, pool)
	if err := schedv1beta1.AddToScheme(h.r.Scheme); err != nil {
		t.Fatal(err)
	}
	h.reconcile()
	ctx := context.Background()
	var pgs schedv1beta1.PodGroupList
	if err := h.c.List(ctx, &pgs, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := h.c.List(ctx, &pods, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	var wls schedv1beta1.WorkloadList
	if err := h.c.List(ctx, &wls, client.InNamespace("ns")); err != nil || len(wls.Items) != 1 || wls.Items[0].Name != "pool" {
		t.Fatalf("workloads %+v (%v), want one named pool", wls.Items, err)
	}
	if len(pgs.Items) != 2 || len(pods.Items) != 4 {
		t.Fatalf("%d podgroups, %d pods; want 2 and 4", len(pgs.Items), len(pods.Items))
	}
	// Three of four pods Ready: one gang is.
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Name == "pool-g1-1" {
			continue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if err := h.c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	h.reconcile()
	var got nnv1.AgentPool
	if err := h.c.Get(ctx, client.ObjectKeyFromObject(pool), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Replicas != 2 || got.Status.ReadyReplicas != 1 || got.Status.WarmTarget != 0 {
		t.Errorf("status replicas/ready/warmTarget %d/%d/%d, want 2/1/0", got.Status.Replicas, got.Status.ReadyReplicas, got.Status.WarmTarget)
	}
	got.Spec.Replicas = ptrInt32(1)
	if err := h.c.Update(ctx, &got); err != nil {
		t.Fatal(err)
	}
	h.reconcile()
	if err := h.c.List(ctx, &pgs, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	if err := h.c.List(ctx, &pods, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	if len(pgs.Items) != 1 || pgs.Items[0].Name != "pool-g0" || len(pods.Items) != 2 {
		t.Errorf("after scale to 1: %d podgroups, %d pods; want pool-g0 and its 2 pods", len(pgs.Items), len(pods.Items))
	}
}

func ptrInt32(v int32) *int32 { return &v }

// TestReconcileGangWithoutWorkloadAPI: on a cluster that does not serve scheduling.k8s.io/v1beta1
// (here: a scheme without it) the pool's Ready condition carries the error, and no pod is created.
func TestReconcileGangWithoutWorkloadAPI(t *testing.T) {
	class := testClass(nil)
	class.Spec.Gang = &nnv1.Gang{Size: 2}
	pool := testPool(1)
	pool.Spec.MinReplicas = ptrInt32(1)
	h := newHarness(t, class, pool)
	if _, err := h.r.Reconcile(context.Background(), ctrlRequest()); err == nil {
		t.Fatal("reconcile without the Workload API succeeded")
	}
	var got nnv1.AgentPool
	if err := h.c.Get(context.Background(), client.ObjectKeyFromObject(pool), &got); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(got.Status.Conditions, nnv1.AgentPoolReady)
	if c == nil || c.Reason != "GangError" || !strings.Contains(c.Message, "GenericWorkload") {
		t.Errorf("Ready condition %+v, want reason GangError naming the GenericWorkload gate", c)
	}
	var pods corev1.PodList
	if err := h.c.List(context.Background(), &pods, client.InNamespace("ns")); err != nil || len(pods.Items) != 0 {
		t.Errorf("%d pods created (%v), want none", len(pods.Items), err)
	}
}

func ctrlRequest() ctrl.Request {
	return ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "pool"}}
}

// TestReconcileGangWaitsForTerminatingPodGroup: a replica removed whole leaves its PodGroup
// terminating (the apiserver's protection finalizer) until its pods are gone; the replica's new
// pods are created only once that PodGroup is gone, never joined to the old one.
func TestReconcileGangWaitsForTerminatingPodGroup(t *testing.T) {
	class := testClass(nil)
	class.Spec.Gang = &nnv1.Gang{Size: 2}
	pool := testPool(1)
	pool.Spec.PrewarmPercent = nil
	pool.Spec.MinReplicas = ptrInt32(1)
	h := newHarness(t, class, pool)
	if err := schedv1beta1.AddToScheme(h.r.Scheme); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	old := &schedv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "pool-g0", Namespace: "ns",
		Finalizers: []string{"scheduling.k8s.io/podgroup-protection"}}}
	if err := h.c.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	h.reconcile()
	if n := len(h.pods()["serving"]); n != 0 {
		t.Fatalf("%d pods created while the old PodGroup pool-g0 is terminating, want 0", n)
	}
	if err := h.c.Get(ctx, client.ObjectKeyFromObject(old), old); err != nil {
		t.Fatal(err)
	}
	old.Finalizers = nil
	if err := h.c.Update(ctx, old); err != nil {
		t.Fatal(err)
	}
	h.reconcile()
	var pg schedv1beta1.PodGroup
	if err := h.c.Get(ctx, client.ObjectKeyFromObject(old), &pg); err != nil || !pg.DeletionTimestamp.IsZero() || pg.Spec.SchedulingPolicy.Gang == nil {
		t.Fatalf("new PodGroup pool-g0: %+v (%v), want a live one with a gang policy", pg.Spec, err)
	}
	if n := len(h.pods()["serving"]); n != 2 {
		t.Errorf("%d pods once the old PodGroup is gone, want 2", n)
	}
}
