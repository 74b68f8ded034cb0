package agentsession

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

type harness struct {
	t   *testing.T
	c   client.Client
	r   *Reconciler
	now time.Time
	// podGrace is the grace period of each pod deletion, by pod name (-1: none given).
	podGrace map[string]int64
}

func newHarness(t *testing.T, objs ...client.Object) *harness {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := nnv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC), podGrace: map[string]int64{}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).
		WithStatusSubresource(&nnv1.AgentSession{}, &nnv1.AgentCheckpoint{}, &nnv1.AgentClass{}).
		WithIndex(&nnv1.AgentSession{}, nodeNameField, sessionNode).
		WithInterceptorFuncs(interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if _, ok := obj.(*corev1.Pod); ok {
				do := (&client.DeleteOptions{}).ApplyOptions(opts)
				h.podGrace[obj.GetName()] = -1
				if do.GracePeriodSeconds != nil {
					h.podGrace[obj.GetName()] = *do.GracePeriodSeconds
				}
			}
			return c.Delete(ctx, obj, opts...)
		}}).Build()
	h.c = c
	h.r = &Reconciler{Client: c, Scheme: s, Metrics: NewMetrics(nil), RestoreHostImage: "pause:test", Now: func() time.Time { return h.now }}
	return h
}

func (h *harness) reconcile() (ctrl.Result, error) {
	return h.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "a", Name: "s1"}})
}

func (h *harness) step(want nnv1.AgentSessionPhase) *nnv1.AgentSession {
	h.t.Helper()
	if _, err := h.reconcile(); err != nil {
		h.t.Fatalf("reconcile: %v", err)
	}
	s := h.session()
	if s.Status.Phase != want {
		h.t.Fatalf("phase %q, want %q (status %+v)", s.Status.Phase, want, s.Status)
	}
	return s
}

func (h *harness) session() *nnv1.AgentSession {
	var s nnv1.AgentSession
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "a", Name: "s1"}, &s); err != nil {
		h.t.Fatal(err)
	}
	return &s
}

// ready marks the pod Running and Ready on node n1 (the kubelet's job).
func (h *harness) ready(name string) {
	h.t.Helper()
	var p corev1.Pod
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "a", Name: name}, &p); err != nil {
		h.t.Fatalf("pod %s: %v", name, err)
	}
	p.Spec.NodeName = "n1"
	if err := h.c.Update(context.Background(), &p); err != nil {
		h.t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := h.c.Status().Update(context.Background(), &p); err != nil {
		h.t.Fatal(err)
	}
}

// finish completes an AgentCheckpoint as the node agent would.
func (h *harness) finish(name string, ph nnv1.AgentCheckpointPhase) *nnv1.AgentCheckpoint {
	h.t.Helper()
	var ck nnv1.AgentCheckpoint
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "a", Name: name}, &ck); err != nil {
		h.t.Fatalf("agentcheckpoint %s: %v", name, err)
	}
	ck.Status.Phase = ph
	if ck.Spec.Operation == nnv1.CheckpointOperation {
		ck.Status.CheckpointID = nnv1.CheckpointIDFor("a", name)
	}
	if err := h.c.Status().Update(context.Background(), &ck); err != nil {
		h.t.Fatal(err)
	}
	return &ck
}

func (h *harness) podExists(name string) bool {
	var p corev1.Pod
	return h.c.Get(context.Background(), types.NamespacedName{Namespace: "a", Name: name}, &p) == nil
}

func newSession(idle time.Duration) *nnv1.AgentSession {
	s := testSession(nil, "")
	s.Spec.IdleTimeout = &metav1.Duration{Duration: idle}
	return s
}

func TestReconcileIdleSuspendAndResume(t *testing.T) {
	h := newHarness(t, testClass(nil), newSession(5*time.Minute))
	s := h.step(nnv1.SessionPending)
	if s.Status.PodName != "s1-1" || !h.podExists("s1-1") {
		t.Fatalf("no first pod: %+v", s.Status)
	}
	var sa corev1.ServiceAccount
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "a", Name: "session-s1"}, &sa); err != nil || *sa.AutomountServiceAccountToken {
		t.Fatalf("service account: %v %+v", err, sa)
	}
	h.ready("s1-1")
	s = h.step(nnv1.SessionRunning)
	if s.Status.NodeName != "n1" || !s.Status.LastActivity.Time.Equal(h.now) {
		t.Fatalf("running status %+v", s.Status)
	}
	h.now = h.now.Add(3 * time.Minute)
	if res, err := h.reconcile(); err != nil || res.RequeueAfter != 2*time.Minute {
		t.Fatalf("before the idle deadline: %v %v, want requeue in 2m", res, err)
	}
	h.now = h.now.Add(2 * time.Minute)
	h.step(nnv1.SessionSuspending)
	h.step(nnv1.SessionSuspending) // the checkpoint runs
	h.finish("s1-1-suspend", nnv1.AgentCheckpointSucceeded)
	s = h.step(nnv1.SessionSuspended)
	if s.Status.LastCheckpoint != "a.s1-1-suspend" || s.Status.PodName != "" || h.podExists("s1-1") || s.Status.SuspendedByRequest {
		t.Fatalf("suspended status %+v (pod s1-1 exists: %v)", s.Status, h.podExists("s1-1"))
	}
	// The state is in the checkpoint: the pod goes at once, its preStop hold cut short.
	if g, ok := h.podGrace["s1-1"]; !ok || g != SuspendedPodGracePeriodSeconds {
		t.Errorf("pod s1-1 deleted with grace %d (deleted: %v), want %d", g, ok, SuspendedPodGracePeriodSeconds)
	}
	h.now = h.now.Add(time.Hour)
	s = h.step(nnv1.SessionSuspended) // no activity: asleep
	s.Annotations = map[string]string{nnv1.SessionLastActivityAnnotation: h.now.Format(time.RFC3339Nano)}
	if err := h.c.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	h.now = h.now.Add(time.Second)
	s = h.step(nnv1.SessionResuming)
	if s.Status.PodName != "s1-2" {
		t.Fatalf("resume pod %q, want a new pod s1-2", s.Status.PodName)
	}
	var host corev1.Pod
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "a", Name: "s1-2"}, &host); err != nil || host.Spec.Containers[0].Image != "pause:test" {
		t.Fatalf("resume pod %v: first container %+v, want the host image pause:test", err, host.Spec.Containers)
	}
	// The Restore comes with the pod, before it runs, so the node agent fetches while it starts.
	var early nnv1.AgentCheckpoint
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "a", Name: "s1-2-resume"}, &early); err != nil {
		t.Fatalf("no Restore created with the resume pod: %v", err)
	}
	h.ready("s1-2")
	h.step(nnv1.SessionResuming)
	rs := h.finish("s1-2-resume", nnv1.AgentCheckpointSucceeded)
	if rs.Spec.Operation != nnv1.RestoreOperation || rs.Spec.CheckpointID != "a.s1-1-suspend" || rs.Spec.Target.Pod != "s1-2" {
		t.Fatalf("restore %+v", rs.Spec)
	}
	s = h.step(nnv1.SessionRunning)
	if c := meta.FindStatusCondition(s.Status.Conditions, ConditionReady); c == nil || c.Status != metav1.ConditionTrue || c.Reason != "Resumed" {
		t.Fatalf("condition %+v", c)
	}
	m := h.r.Metrics
	for name, h := range map[string]prometheus.Histogram{"suspend": m.SuspendSeconds, "resume": m.ResumeSeconds} {
		var d dto.Metric
		if err := h.Write(&d); err != nil {
			t.Fatal(err)
		}
		if d.GetHistogram().GetSampleCount() != 1 {
			t.Errorf("%s latency samples %d, want 1", name, d.GetHistogram().GetSampleCount())
		}
	}
	if got := testutil.ToFloat64(m.Sessions.WithLabelValues("Running")); got != 1 {
		t.Errorf("running sessions gauge %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.Sessions.WithLabelValues("Suspended")); got != 0 {
		t.Errorf("suspended sessions gauge %v, want 0", got)
	}
}

func TestReconcileRequestedSuspendResumesOnUnsuspend(t *testing.T) {
	h := newHarness(t, testClass(nil), newSession(time.Hour))
	h.step(nnv1.SessionPending)
	h.ready("s1-1")
	s := h.step(nnv1.SessionRunning)
	s.Spec.Suspend = true
	if err := h.c.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	h.step(nnv1.SessionSuspending)
	h.finish("s1-1-suspend", nnv1.AgentCheckpointSucceeded)
	s = h.step(nnv1.SessionSuspended)
	if !s.Status.SuspendedByRequest {
		t.Fatal("suspendedByRequest not set")
	}
	s.Spec.Suspend = false
	if err := h.c.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	h.step(nnv1.SessionResuming)
}

func TestReconcileMissingRuntimeClass(t *testing.T) {
	h := newHarness(t, testClass(ptr("kata")), newSession(time.Hour))
	if _, err := h.reconcile(); err == nil || !strings.Contains(err.Error(), "spec.runtimeClassName") {
		t.Fatalf("reconcile: %v, want an error naming spec.runtimeClassName", err)
	}
	c := meta.FindStatusCondition(h.session().Status.Conditions, ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "spec.runtimeClassName") || !strings.Contains(c.Message, "kata") {
		t.Fatalf("condition %+v", c)
	}
	if h.podExists("s1-1") {
		t.Fatal("a pod was created with a missing RuntimeClass")
	}
	if err := h.c.Create(context.Background(), &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "kata"}, Handler: "kata"}); err != nil {
		t.Fatal(err)
	}
	h.step(nnv1.SessionPending)
	var p corev1.Pod
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "a", Name: "s1-1"}, &p); err != nil || p.Spec.RuntimeClassName == nil || *p.Spec.RuntimeClassName != "kata" {
		t.Fatalf("pod runtimeClassName: %v %v", err, p.Spec.RuntimeClassName)
	}
}

// TestReconcileCreatesSessionNetworkPolicy: with a session policy spec, the session's own
// NetworkPolicy exists before its pod, selects exactly the session's pods (whatever selector the
// installer's spec carries), keeps the spec's rules, and is owned by the session; without a spec
// none is created.
func TestReconcileCreatesSessionNetworkPolicy(t *testing.T) {
	dns := intstr.FromInt32(53)
	spec := networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: nnv1.SessionLabel, Operator: metav1.LabelSelectorOpExists}}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Egress:      []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: &dns}}}},
	}
	for _, withSpec := range []bool{true, false} {
		h := newHarness(t, testClass(nil), newSession(0))
		if withSpec {
			h.r.NetworkPolicy = &spec
		}
		h.step(nnv1.SessionPending)
		var np networkingv1.NetworkPolicy
		err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "a", Name: "session-s1"}, &np)
		if !withSpec {
			if err == nil {
				t.Fatalf("a NetworkPolicy without a spec: %+v", np)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if sel := np.Spec.PodSelector; len(sel.MatchExpressions) != 0 || len(sel.MatchLabels) != 1 || sel.MatchLabels[nnv1.SessionLabel] != "s1" {
			t.Errorf("podSelector %+v, want exactly neuronetes.io/session=s1", sel)
		}
		if len(np.Spec.PolicyTypes) != 2 || len(np.Spec.Egress) != 1 || len(np.Spec.Ingress) != 0 {
			t.Errorf("spec %+v, want the installer's rules", np.Spec)
		}
		if ref := metav1.GetControllerOf(&np); ref == nil || ref.Kind != "AgentSession" || ref.Name != "s1" || np.Labels[nnv1.ManagedByLabel] != nnv1.ManagedByController {
			t.Errorf("owner %+v labels %v", ref, np.Labels)
		}
	}
}

// TestReconcileRetriesFailedCheckpoint: a failed suspension leaves the session Running, deletes
// the failed AgentCheckpoint, and the next idle deadline checkpoints again (a new run, not the
// old failure).
func TestReconcileRetriesFailedCheckpoint(t *testing.T) {
	h := newHarness(t, testClass(nil), newSession(time.Minute))
	h.step(nnv1.SessionPending)
	h.ready("s1-1")
	h.step(nnv1.SessionRunning)
	h.now = h.now.Add(time.Minute)
	h.step(nnv1.SessionSuspending)
	h.finish("s1-1-suspend", nnv1.AgentCheckpointFailed)
	h.step(nnv1.SessionRunning)
	var ck nnv1.AgentCheckpoint
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "a", Name: "s1-1-suspend"}, &ck); err == nil {
		t.Fatalf("the failed checkpoint is kept: %+v", ck.Status)
	}
	h.now = h.now.Add(time.Minute)
	h.step(nnv1.SessionSuspending)
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "a", Name: "s1-1-suspend"}, &ck); err != nil || ck.Status.Phase != "" {
		t.Fatalf("no new checkpoint run: %v %+v", err, ck.Status)
	}
	h.step(nnv1.SessionSuspending) // it runs; no failure seen
}

// TestReconcileForeignCheckpointCreatesNothing: a suspended session whose status.lastCheckpoint
// names another namespace's checkpoint gets neither a resume pod nor a Restore, and Ready=False
// naming status.lastCheckpoint.
func TestReconcileForeignCheckpointCreatesNothing(t *testing.T) {
	s := newSession(time.Hour)
	s.Status = nnv1.AgentSessionStatus{Phase: nnv1.SessionSuspended, SuspendedByRequest: true, LastCheckpoint: "victim.s1-1-suspend", Pods: 1}
	h := newHarness(t, testClass(nil), s)
	if _, err := h.reconcile(); err == nil || !strings.Contains(err.Error(), "status.lastCheckpoint") {
		t.Fatalf("reconcile: %v, want an error naming status.lastCheckpoint", err)
	}
	if h.podExists("s1-2") {
		t.Error("a resume pod was created for a foreign checkpoint")
	}
	var list nnv1.AgentCheckpointList
	if err := h.c.List(context.Background(), &list); err != nil || len(list.Items) != 0 {
		t.Errorf("AgentCheckpoints %v (%v), want none", list.Items, err)
	}
	c := meta.FindStatusCondition(h.session().Status.Conditions, ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "status.lastCheckpoint") {
		t.Fatalf("condition %+v", c)
	}
}
