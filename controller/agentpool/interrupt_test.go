package agentpool

import (
	"context"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/warmpool"
)

func TestInterruptionDrains(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	pods := []interruptedPod{{"s1", warmpool.Serving, t0}, {"w1", warmpool.Warm, t0}}
	for _, tc := range []struct {
		name             string
		readyOthers, des int32
		now              time.Time
		want             []string
	}{
		{"replacement not ready: warm leaves, serving waits", 1, 2, t0.Add(10 * time.Second), []string{"w1"}},
		{"replacement ready", 2, 2, t0.Add(time.Second), []string{"s1", "w1"}},
		{"timeout reached", 0, 2, t0.Add(30 * time.Second), []string{"s1", "w1"}},
	} {
		if got := interruptionDrains(pods, tc.readyOthers, tc.des, 30*time.Second, tc.now); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestInterruptionTaintAndPolicy(t *testing.T) {
	keys := append(append([]string(nil), DefaultInterruptionTaints...), "example.com/reclaim")
	for _, tc := range []struct {
		key  string
		want bool
	}{
		{"karpenter.sh/disrupted", true}, {"karpenter.sh/disruption", true}, {"aws-node-termination-handler/spot-itn", true},
		{"cloud.google.com/impending-node-termination", true}, {"example.com/reclaim", true}, {"node.kubernetes.io/unreachable", false},
	} {
		if _, got := interruptionTaint([]corev1.Taint{{Key: tc.key, Effect: corev1.TaintEffectNoSchedule}}, keys); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.key, got, tc.want)
		}
	}
	spec := func(oi *nnv1.InterruptionPolicy) *nnv1.AgentPoolSpec {
		return &nnv1.AgentPoolSpec{Autoscaling: &nnv1.AutoscalingSpec{SpotStrategy: &nnv1.SpotStrategy{Enabled: true, OnInterruption: oi}}}
	}
	if p := resolveInterruption(spec(&nnv1.InterruptionPolicy{Action: nnv1.InterruptionMigrateToOnDemand})); !p.migrate || p.timeout != DefaultInterruptionTimeout {
		t.Errorf("default timeout: %+v", p)
	}
	if p := resolveInterruption(spec(&nnv1.InterruptionPolicy{Action: nnv1.InterruptionMigrateToOnDemand, Timeout: "2m"})); p.timeout != 2*time.Minute {
		t.Errorf("timeout: %+v", p)
	}
	if p := resolveInterruption(spec(nil)); p.migrate {
		t.Errorf("no onInterruption: %+v", p)
	}
}

// interruptHarness is a spot pool whose serving pod "victim" runs on a spot node that then gets
// the Karpenter interruption taint; the other pods run on an on-demand node.
func interruptHarness(t *testing.T, prewarm int32) (*harness, string) {
	pool := testPool(2)
	pool.Spec.PrewarmPercent = ptr.To(prewarm)
	pool.Spec.Autoscaling.SpotStrategy = &nnv1.SpotStrategy{Enabled: true,
		OnInterruption: &nnv1.InterruptionPolicy{Action: nnv1.InterruptionMigrateToOnDemand, Timeout: "30s"}}
	spotNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot-1", Labels: map[string]string{"karpenter.sh/capacity-type": "spot"}}}
	odNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "od-1", Labels: map[string]string{"karpenter.sh/capacity-type": "on-demand"}}}
	h := newHarness(t, testClass(nil), pool, spotNode, odNode)
	h.reconcile()
	got := h.pods()
	victim := got["serving"][0]
	var l corev1.PodList
	if err := h.c.List(context.Background(), &l, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	for i := range l.Items {
		p := &l.Items[i]
		p.Spec.NodeName = "od-1"
		if p.Name == victim {
			p.Spec.NodeName = "spot-1"
		}
		if err := h.c.Update(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	spotNode.Spec.Taints = []corev1.Taint{{Key: "karpenter.sh/disrupted", Effect: corev1.TaintEffectNoSchedule}}
	if err := h.c.Update(context.Background(), spotNode); err != nil {
		t.Fatal(err)
	}
	return h, victim
}

func (h *harness) pod(name string) (*corev1.Pod, bool) {
	var p corev1.Pod
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, &p); err != nil {
		return nil, false
	}
	return &p, p.DeletionTimestamp.IsZero()
}

// TestInterruptionMigratesWarmFirst: a warm pod takes over at once, so the interrupted pod is
// drained in the same reconcile.
func TestInterruptionMigratesWarmFirst(t *testing.T) {
	h, victim := interruptHarness(t, 20) // 2 warm pods
	before := h.pool().Status.WarmActivations
	h.reconcile()
	if _, live := h.pod(victim); live {
		t.Fatalf("interrupted pod %s still live although a warm pod took over", victim)
	}
	got := h.pods()
	if len(got["serving"]) != 2 {
		t.Fatalf("serving %v, want 2", got["serving"])
	}
	if h.pool().Status.WarmActivations != before+1 {
		t.Fatalf("warm activations %d, want %d (a warm pod first)", h.pool().Status.WarmActivations, before+1)
	}
}

// TestInterruptionColdReplacementThenTimeout: without warm pods the replacement is a new pod that
// requires on-demand capacity; the interrupted pod serves until it is Ready, at the latest until
// the timeout.
func TestInterruptionColdReplacementThenTimeout(t *testing.T) {
	h, victim := interruptHarness(t, 0)
	res := h.reconcile()
	p, live := h.pod(victim)
	if !live || p.Annotations[InterruptedAtAnnotation] == "" || podState(p) != warmpool.Serving {
		t.Fatalf("interrupted pod must keep serving (stamped) until its replacement is Ready: live %v, pod %+v", live, p)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > 30*time.Second {
		t.Fatalf("requeue %v, want within the 30s timeout", res.RequeueAfter)
	}
	_, onDemand := h.capacity()
	var replacement *corev1.Pod
	for i := range onDemand {
		if onDemand[i].Spec.NodeName == "" {
			replacement = &onDemand[i]
		}
	}
	if replacement == nil {
		t.Fatalf("no on-demand replacement pod: %v", onDemand)
	}
	terms := replacement.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchExpressions) != len(spotNodeLabels) || len(replacement.Spec.Tolerations) != 0 {
		t.Fatalf("replacement does not require on-demand nodes: %+v", replacement.Spec)
	}
	h.now = h.now.Add(31 * time.Second)
	h.reconcile()
	if _, live := h.pod(victim); live {
		t.Fatalf("interrupted pod %s not drained after the timeout", victim)
	}
}
