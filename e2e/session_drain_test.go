package e2e

// AgentSession drain (docs/sessions.md "Drain"): a session running on a node that gets an
// interruption taint is suspended and resumes on the cluster's second real node with its memory.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/agentsession"
	"github.com/neuronetes/neuronetes/e2e/cluster"
)

// cordonNode sets (or clears) spec.unschedulable, as kubectl cordon (uncordon) does.
func cordonNode(t *testing.T, e *Env, name string, on bool) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"unschedulable": on}})
	if _, err := e.Kube.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Errorf("cordon of node %s (on=%v): %v", name, on, err)
	}
}

// TestAgentSessionDrainResumesElsewhere: a session without idle timeout runs the demo agent on
// node 1 (node 2 cordoned while it starts) and serves three turns (state: its token counters).
// Node 1 then gets Karpenter's interruption taint karpenter.sh/disrupted: with no request and no
// activity, the session is checkpointed (event NodeDraining), its pod deleted, and it resumes at
// once into a new pod on node 2 whose agent holds the same counters (checksum) and serves the
// next turn; the resume pod requires a node other than node 1. Then node 1's taint goes and node 2
// is cordoned: the session moves back to node 1 with the counters of its four turns (a checkpoint
// of a resumed session dumps the restored agent). Last, the Eviction API refuses to evict the
// session's pod (its PodDisruptionBudget), and kubectl drain of node 1 (the session's pod only),
// whose evictions are refused the same way, cordons the node: the session is checkpointed, its pod
// deleted, the drain completes, and the session continues on node 2 with the same counters,
// without PodLost or CheckpointFailed events. The taints and cordons go at cleanup.
func TestAgentSessionDrainResumesElsewhere(t *testing.T) {
	e := requireEnv(t)
	requireContainerCRIU(t, e)
	ctrlInstallCRDs(t, e)
	for _, crd := range []string{"agentcheckpoints", "agentsessions", "agentclasses"} {
		e.Kubectl(t, "wait", "--for=condition=Established", "crd/"+crd+".neuronetes.io", "--timeout=60s")
	}
	img := e.Image(t, "demo-agent", "./cmd/demo-agent")
	e.requireSecondNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ns := e.NamespaceWithPodSecurity(t, "sess-drain", "baseline", "CRIU on the development VM needs the checkpointed agent to run as root (docs/checkpoint.md)")
	node1, node2 := e.NodeName, cluster.SecondNodeName

	c, err := client.New(e.Config, client.Options{Scheme: ctrlScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	// The demo agent's class, on either node (it tolerates node 2's taint).
	class := sessionClass(ns, img, "")
	class.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: cluster.SecondNodeLabel, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	if err := c.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	engines := startNodeAgents(t, e, ctx)
	mgr, err := ctrl.NewManager(e.Config, snapshotManagerOptions(ctrlScheme(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := (&agentsession.Reconciler{RestoreHostImage: cluster.PauseImage}).SetupWithManager(mgr, ns); err != nil {
		t.Fatal(err)
	}
	go func() { _ = mgr.Start(ctx) }()
	t.Cleanup(func() {
		var pods corev1.PodList
		if err := c.List(context.Background(), &pods, client.InNamespace(ns)); err == nil {
			for _, p := range pods.Items {
				if eng := engines[p.Spec.NodeName]; eng != nil && len(p.Status.ContainerStatuses) > 0 {
					removeRestored(t, eng.C, p.Status.ContainerStatuses[0].ContainerID)
				}
			}
		}
	})
	events := func() []corev1.Event {
		var evs corev1.EventList
		if err := c.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
			t.Logf("events: %v", err)
		}
		return evs.Items
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var cks v1alpha1.AgentCheckpointList
		if err := c.List(context.Background(), &cks, client.InNamespace(ns)); err == nil {
			for _, ck := range cks.Items {
				t.Logf("AgentCheckpoint %s: %s %s", ck.Name, ck.Status.Phase, ck.Status.Message)
			}
		}
		for _, ev := range events() {
			t.Logf("event %s %s %s: %s", ev.InvolvedObject.Name, ev.Type, ev.Reason, ev.Message)
		}
	})
	session := func() *v1alpha1.AgentSession {
		var s v1alpha1.AgentSession
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "s"}, &s); err != nil {
			t.Fatal(err)
		}
		return &s
	}
	pod := func(name string) *corev1.Pod {
		var p corev1.Pod
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		return &p
	}

	// Node 2 cordoned while the session starts, so that it starts on node 1.
	cordonNode(t, e, node2, true)
	t.Cleanup(func() { cordonNode(t, e, node2, false) })
	if err := c.Create(ctx, &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"},
		Spec: v1alpha1.AgentSessionSpec{ClassRef: v1alpha1.LocalObjectReference{Name: "demo"}}}); err != nil {
		t.Fatal(err)
	}
	var s *v1alpha1.AgentSession
	Eventually(t, 2*time.Minute, "session s Running", func() (bool, error) {
		s = session()
		return s.Status.Phase == v1alpha1.SessionRunning, fmt.Errorf("phase %q, conditions %+v", s.Status.Phase, s.Status.Conditions)
	})
	first := s.Status.PodName
	if s.Status.NodeName != node1 {
		t.Fatalf("session started on %q, want %s", s.Status.NodeName, node1)
	}
	ip := pod(first).Status.PodIP
	Eventually(t, 30*time.Second, "demo agent of "+first+" answers /readyz", func() (bool, error) { return agentReady(ip) })
	for i := range 3 {
		if err := chat(ip, fmt.Sprintf("turn %d: remember the number 42", i)); err != nil {
			t.Fatal(err)
		}
	}
	served, err := demoCounters(ip)
	if err != nil || served["vllm:generation_tokens_total"] == 0 {
		t.Fatalf("demo agent state %v (%v)", served, err)
	}
	sum := stateSum(served)
	cordonNode(t, e, node2, false)

	// Node 1's interruption notice: the session moves to node 2 by itself.
	taintNode(t, e, node1, true)
	t.Cleanup(func() { taintNode(t, e, node1, false) })
	notice := time.Now()
	var suspendedAfter time.Duration
	Eventually(t, 3*time.Minute, "session s Running on "+node2, func() (bool, error) {
		s = session()
		if suspendedAfter == 0 && s.Status.Phase == v1alpha1.SessionSuspended {
			suspendedAfter = time.Since(notice)
		}
		return s.Status.Phase == v1alpha1.SessionRunning && s.Status.PodName != first,
			fmt.Errorf("phase %q pod %q node %q drainedNode %q, conditions %+v", s.Status.Phase, s.Status.PodName, s.Status.NodeName, s.Status.DrainedNode, s.Status.Conditions)
	})
	moved := time.Since(notice)
	t.Logf("interruption taint to Running on %s in %s (Suspended seen after %s; 0 = not seen between polls)", s.Status.NodeName,
		moved.Round(10*time.Millisecond), suspendedAfter.Round(10*time.Millisecond))
	if s.Status.NodeName != node2 || s.Status.DrainedNode != "" || s.Status.LastCheckpoint == "" {
		t.Fatalf("resumed status %+v, want node %s, no drainedNode, a checkpoint", s.Status, node2)
	}
	if _, ok := s.Annotations[v1alpha1.SessionLastActivityAnnotation]; ok {
		t.Fatalf("activity annotation %q: the resume must come without activity", s.Annotations[v1alpha1.SessionLastActivityAnnotation])
	}
	p := pod(s.Status.PodName)
	aff := p.Spec.Affinity
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
		!strings.Contains(fmt.Sprint(aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms), node1) {
		t.Errorf("resume pod %s affinity %+v, want it to exclude %s", p.Name, aff, node1)
	}
	Eventually(t, time.Minute, "drained pod "+first+" gone", func() (bool, error) {
		var old corev1.Pod
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: first}, &old)
		return err != nil && strings.Contains(err.Error(), "not found"), err
	})
	var reasons []string
	for _, ev := range events() {
		if ev.InvolvedObject.Name == "s" {
			reasons = append(reasons, ev.Reason)
		}
	}
	if got := strings.Join(reasons, ","); !strings.Contains(got, "NodeDraining") || !strings.Contains(got, "ResumingElsewhere") || strings.Contains(got, "CheckpointFailed") {
		t.Errorf("session events %s, want NodeDraining and ResumingElsewhere and no CheckpointFailed", got)
	}
	restored, err := demoCounters(p.Status.PodIP)
	if err != nil {
		t.Fatal(err)
	}
	if got := stateSum(restored); got != sum {
		t.Fatalf("agent on %s counters %v (sum %s), want the drained agent's %v (sum %s)", node2, restored, got, served, sum)
	}
	if err := chat(p.Status.PodIP, "turn 4: what was the number?"); err != nil {
		t.Fatalf("the resumed session does not serve: %v", err)
	}
	t.Logf("state sum %s on %s before the drain and on %s after it", sum, node1, node2)

	// Back: node 1's notice is withdrawn and node 2 is cordoned. The resumed session (its
	// agent a container restored next to the pod's pause host) moves to node 1 with the state
	// of its four turns: the checkpoint dumps the restored agent, not the host.
	if served, err = demoCounters(p.Status.PodIP); err != nil {
		t.Fatal(err)
	}
	sum, second := stateSum(served), s.Status.PodName
	taintNode(t, e, node1, false)
	cordonNode(t, e, node2, true)
	notice = time.Now()
	Eventually(t, 3*time.Minute, "session s Running on "+node1+" again", func() (bool, error) {
		s = session()
		return s.Status.Phase == v1alpha1.SessionRunning && s.Status.PodName != second,
			fmt.Errorf("phase %q pod %q node %q drainedNode %q, conditions %+v", s.Status.Phase, s.Status.PodName, s.Status.NodeName, s.Status.DrainedNode, s.Status.Conditions)
	})
	t.Logf("cordon of %s to Running on %s in %s", node2, s.Status.NodeName, time.Since(notice).Round(10*time.Millisecond))
	if s.Status.NodeName != node1 {
		t.Fatalf("session moved to %q, want %s", s.Status.NodeName, node1)
	}
	back, err := demoCounters(pod(s.Status.PodName).Status.PodIP)
	if err != nil {
		t.Fatal(err)
	}
	if got := stateSum(back); got != sum {
		t.Fatalf("agent back on %s counters %v (sum %s), want %v (sum %s)", node1, back, got, served, sum)
	}
	t.Logf("state sum %s on %s before the cordon and on %s after it", sum, node2, node1)

	// kubectl drain of node 1 (this session's pod only): it cordons the node and tries to evict
	// the pod through the Eviction API, which the session's PodDisruptionBudget refuses (429,
	// retried every 5 s); the cordon suspends the session, whose pod the controller deletes once
	// checkpointed, and the session continues on node 2 with the same counters.
	third := s.Status.PodName
	requireEvictionRefused(t, e, ns, "s", third)
	sum = stateSum(back)
	cordonNode(t, e, node2, false)
	t.Cleanup(func() { cordonNode(t, e, node1, false) })
	notice = time.Now()
	drainDone := make(chan error, 1)
	var drained time.Duration
	var drainOut string
	go func() {
		out, err := e.KubectlErr("drain", node1, "--pod-selector="+v1alpha1.SessionLabel+"=s", "--delete-emptydir-data", "--ignore-daemonsets", "--timeout=2m")
		drained, drainOut = time.Since(notice), out
		drainDone <- err
	}()
	Eventually(t, 3*time.Minute, "session s Running on "+node2+" after kubectl drain", func() (bool, error) {
		s = session()
		return s.Status.Phase == v1alpha1.SessionRunning && s.Status.PodName != third,
			fmt.Errorf("phase %q pod %q node %q drainedNode %q, conditions %+v", s.Status.Phase, s.Status.PodName, s.Status.NodeName, s.Status.DrainedNode, s.Status.Conditions)
	})
	moved = time.Since(notice)
	if err := <-drainDone; err != nil {
		t.Fatalf("kubectl drain: %v", err)
	}
	t.Logf("kubectl drain of %s: session Running on %s after %s; kubectl drain returned after %s:\n%s",
		node1, s.Status.NodeName, moved.Round(10*time.Millisecond), drained.Round(10*time.Millisecond), drainOut)
	if s.Status.NodeName != node2 {
		t.Fatalf("session moved to %q, want %s", s.Status.NodeName, node2)
	}
	last, err := demoCounters(pod(s.Status.PodName).Status.PodIP)
	if err != nil {
		t.Fatal(err)
	}
	if got := stateSum(last); got != sum {
		t.Fatalf("agent on %s after kubectl drain: counters %v (sum %s), want %v (sum %s)", node2, last, got, back, sum)
	}
	reasons = reasons[:0]
	for _, ev := range events() {
		if ev.InvolvedObject.Name == "s" {
			reasons = append(reasons, ev.Reason)
		}
	}
	if got := strings.Join(reasons, ","); strings.Contains(got, "PodLost") || strings.Contains(got, "CheckpointFailed") {
		t.Errorf("session events %s: a drain lost the pod or failed a checkpoint", got)
	}
	t.Logf("state sum %s on %s before kubectl drain and on %s after it; session events %v", sum, node1, node2, reasons)
}
