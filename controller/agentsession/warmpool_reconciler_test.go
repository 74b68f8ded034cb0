package agentsession

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// pooledClass is the test class with a warm pool of size and a UID (owner references name it).
func pooledClass(size int32) *nnv1.AgentClass {
	c := testClass(nil)
	c.UID = "class-uid"
	c.Spec.Sessions = &nnv1.SessionsConfig{WarmPoolSize: size}
	return c
}

func sessionPolicySpec() *networkingv1.NetworkPolicySpec {
	return &networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}}
}

// warmHarness adds the warm pool reconciler, on the same client, to the session harness.
func warmHarness(t *testing.T, objs ...client.Object) (*harness, *WarmPoolReconciler) {
	h := newHarness(t, objs...)
	h.r.NetworkPolicy = sessionPolicySpec()
	return h, &WarmPoolReconciler{Client: h.c, Scheme: h.r.Scheme, NetworkPolicy: h.r.NetworkPolicy, Now: h.r.Now}
}

func fillPool(t *testing.T, w *WarmPoolReconciler) {
	t.Helper()
	if _, err := w.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "a", Name: "demo"}}); err != nil {
		t.Fatalf("warm pool reconcile: %v", err)
	}
}

func warmPods(t *testing.T, c client.Client) []corev1.Pod {
	t.Helper()
	var l corev1.PodList
	if err := c.List(context.Background(), &l, client.InNamespace("a"), client.MatchingLabels{nnv1.WarmPoolLabel: "demo"}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// TestWarmPoolFillClaimRefill: the pool fills to its size (each pod with its own ServiceAccount,
// which the pod owns, behind the pool's NetworkPolicy); a new session claims the Ready warm pod
// and is Running at once, with the pod's ServiceAccount as its own and its NetworkPolicy made
// first; the pool refills; the session's resume pod runs as that same ServiceAccount.
func TestWarmPoolFillClaimRefill(t *testing.T) {
	s := newSession(0)
	s.UID = "s1-uid"
	h, w := warmHarness(t, pooledClass(2), s)
	ctx := context.Background()
	fillPool(t, w)
	fillPool(t, w) // nothing more: both are there
	pods := warmPods(t, h.c)
	if len(pods) != 2 {
		t.Fatalf("%d warm pods, want 2", len(pods))
	}
	for _, p := range pods {
		var sa corev1.ServiceAccount
		if err := h.c.Get(ctx, types.NamespacedName{Namespace: "a", Name: p.Spec.ServiceAccountName}, &sa); err != nil || p.Spec.ServiceAccountName != p.Name {
			t.Fatalf("pod %s serviceAccount %q: %v", p.Name, p.Spec.ServiceAccountName, err)
		}
		if ref := metav1.GetControllerOf(&sa); ref == nil || ref.Kind != "AgentClass" || ref.UID != "class-uid" || *sa.AutomountServiceAccountToken {
			t.Errorf("serviceaccount %s owner %+v automount %v, want the class and no token", sa.Name, ref, *sa.AutomountServiceAccountToken)
		}
		if ref := metav1.GetControllerOf(&p); ref == nil || ref.Kind != "AgentClass" || ref.UID != "class-uid" {
			t.Errorf("pod %s owner %+v, want the class", p.Name, ref)
		}
	}
	var np networkingv1.NetworkPolicy
	if err := h.c.Get(ctx, types.NamespacedName{Namespace: "a", Name: "warmpool-demo"}, &np); err != nil || np.Spec.PodSelector.MatchLabels[nnv1.WarmPoolLabel] != "demo" {
		t.Fatalf("warm pool policy %v %+v", err, np.Spec.PodSelector)
	}
	var class nnv1.AgentClass
	_ = h.c.Get(ctx, types.NamespacedName{Namespace: "a", Name: "demo"}, &class)
	if c := meta.FindStatusCondition(class.Status.Conditions, ConditionSessionWarmPool); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("class condition %+v", c)
	}

	// No pod Ready yet: the session gets a pod of its own.
	h2, _ := warmHarness(t, pooledClass(2), newSession(0))
	h2.step(nnv1.SessionPending)

	warm := pods[1].Name
	h.ready(warm)
	got := h.step(nnv1.SessionRunning)
	if got.Status.PodName != warm || got.Status.ServiceAccountName != warm || got.Status.Pods != 1 || got.Status.NodeName != "n1" {
		t.Fatalf("status %+v, want warm pod %s claimed", got.Status, warm)
	}
	checkSessionPDB(t, h.c) // created before the claim
	if c := meta.FindStatusCondition(got.Status.Conditions, ConditionReady); c == nil || c.Reason != ClaimReason || c.Status != metav1.ConditionTrue {
		t.Errorf("condition %+v, want Ready True Claimed", c)
	}
	var p corev1.Pod
	_ = h.c.Get(ctx, types.NamespacedName{Namespace: "a", Name: warm}, &p)
	if ref := metav1.GetControllerOf(&p); ref == nil || ref.Kind != "AgentSession" || ref.UID != "s1-uid" || len(p.OwnerReferences) != 1 ||
		p.Labels[nnv1.SessionLabel] != "s1" || p.Labels[nnv1.WarmPoolLabel] != "" {
		t.Fatalf("claimed pod owner %+v labels %v", p.OwnerReferences, p.Labels)
	}
	var sa corev1.ServiceAccount
	_ = h.c.Get(ctx, types.NamespacedName{Namespace: "a", Name: warm}, &sa)
	if ref := metav1.GetControllerOf(&sa); ref == nil || ref.UID != "class-uid" {
		t.Fatalf("serviceaccount owners %+v right after the claim, want still the class's (adopted off the path to Running)", sa.OwnerReferences)
	}
	h.step(nnv1.SessionRunning) // the next reconcile adopts it
	_ = h.c.Get(ctx, types.NamespacedName{Namespace: "a", Name: warm}, &sa)
	if ref := metav1.GetControllerOf(&sa); ref == nil || ref.UID != "s1-uid" || len(sa.OwnerReferences) != 1 || sa.Labels[nnv1.SessionLabel] != "s1" {
		t.Fatalf("claimed serviceaccount owners %+v labels %v, want the session alone", sa.OwnerReferences, sa.Labels)
	}
	if err := h.c.Get(ctx, types.NamespacedName{Namespace: "a", Name: "session-s1"}, &np); err != nil {
		t.Fatalf("session policy: %v", err)
	}
	if err := h.c.Get(ctx, types.NamespacedName{Namespace: "a", Name: "session-s1"}, &sa); err == nil {
		t.Error("a session-s1 ServiceAccount was created besides the claimed one")
	}
	fillPool(t, w)
	if n := len(warmPods(t, h.c)); n != 2 {
		t.Fatalf("%d warm pods after the refill, want 2", n)
	}

	// Suspend and resume: the resume pod runs as the claimed ServiceAccount.
	got = h.session()
	got.Spec.Suspend = true
	if err := h.c.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	h.step(nnv1.SessionSuspending)
	h.finish("s1-1-suspend", nnv1.AgentCheckpointSucceeded)
	got = h.step(nnv1.SessionSuspended)
	got.Spec.Suspend = false
	if err := h.c.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	got = h.step(nnv1.SessionResuming)
	_ = h.c.Get(ctx, types.NamespacedName{Namespace: "a", Name: got.Status.PodName}, &p)
	if got.Status.PodName != "s1-2" || p.Spec.ServiceAccountName != warm {
		t.Fatalf("resume pod %s runs as %q, want s1-2 as %s", got.Status.PodName, p.Spec.ServiceAccountName, warm)
	}
}

// TestClaimRace: two sessions read the same single Ready warm pod and claim it at once; the
// pod's optimistic update lets exactly one have it, and the other claims nothing.
func TestClaimRace(t *testing.T) {
	s1, s2 := newSession(0), newSession(0)
	s1.UID, s2.Name, s2.UID = "s1-uid", "s2", "s2-uid"
	var listed sync.WaitGroup
	listed.Add(2)
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = nnv1.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pooledClass(1), s1, s2).
		WithStatusSubresource(&nnv1.AgentSession{}, &nnv1.AgentClass{}).Build()
	w := &WarmPoolReconciler{Client: c, Scheme: scheme}
	fillPool(t, w)
	pod := warmPods(t, c)[0]
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := c.Status().Update(context.Background(), &pod); err != nil {
		t.Fatal(err)
	}
	// Both list the warm pods before either updates one.
	raced := interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{List: func(ctx context.Context, cl client.WithWatch, l client.ObjectList, opts ...client.ListOption) error {
		err := cl.List(ctx, l, opts...)
		if _, ok := l.(*corev1.PodList); ok {
			listed.Done()
			listed.Wait()
		}
		return err
	}})
	r := &Reconciler{Client: raced, Scheme: scheme}
	won := make([]bool, 2)
	errs := make([]error, 2)
	var done sync.WaitGroup
	for i, s := range []*nnv1.AgentSession{s1, s2} {
		done.Add(1)
		go func() {
			defer done.Done()
			won[i], errs[i] = r.claim(context.Background(), s, time.Now())
		}()
	}
	done.Wait()
	if errs[0] != nil || errs[1] != nil || won[0] == won[1] {
		t.Fatalf("claims %v errors %v, want exactly one winner", won, errs)
	}
	winner := s1
	if won[1] {
		winner = s2
	}
	var p corev1.Pod
	_ = c.Get(context.Background(), client.ObjectKeyFromObject(&pod), &p)
	if ref := metav1.GetControllerOf(&p); ref == nil || ref.UID != winner.UID || p.Labels[nnv1.SessionLabel] != winner.Name {
		t.Fatalf("pod owner %+v labels %v, want %s", ref, p.Labels, winner.Name)
	}
}

// TestWarmPoolRetiresStaleAndReportsBadInput: a template change retires the pods of the old
// template and fills with new ones; a class whose pods cannot be built, or whose RuntimeClass
// is missing, gets SessionWarmPool=False naming the field and no pods.
func TestWarmPoolRetiresStaleAndReportsBadInput(t *testing.T) {
	h, w := warmHarness(t, pooledClass(2))
	ctx := context.Background()
	fillPool(t, w)
	old := warmPods(t, h.c)
	var class nnv1.AgentClass
	_ = h.c.Get(ctx, types.NamespacedName{Namespace: "a", Name: "demo"}, &class)
	class.Spec.Template.Spec.Containers[0].Image = "demo:2"
	if err := h.c.Update(ctx, &class); err != nil {
		t.Fatal(err)
	}
	w.pending = nil // as after pendingTTL
	fillPool(t, w)
	now := warmPods(t, h.c)
	if len(now) != 2 {
		t.Fatalf("%d warm pods, want 2", len(now))
	}
	for _, p := range now {
		if p.Name == old[0].Name || p.Name == old[1].Name || p.Spec.Containers[0].Image != "demo:2" {
			t.Errorf("pod %s (image %s) survived the template change", p.Name, p.Spec.Containers[0].Image)
		}
	}
	for _, p := range old {
		var sa corev1.ServiceAccount
		if err := h.c.Get(ctx, types.NamespacedName{Namespace: "a", Name: p.Spec.ServiceAccountName}, &sa); err == nil {
			t.Errorf("serviceaccount %s of retired pod %s remains", sa.Name, p.Name)
		}
	}

	for _, tc := range []struct {
		name  string
		edit  func(*nnv1.AgentClass)
		field string
	}{
		{"no containers", func(c *nnv1.AgentClass) { c.Spec.Template.Spec.Containers = nil }, "spec.template.spec.containers"},
		{"missing runtime class", func(c *nnv1.AgentClass) { c.Spec.Template.Spec.RuntimeClassName = ptr("kata") }, "spec.template.spec.runtimeClassName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := pooledClass(1)
			tc.edit(c)
			h, w := warmHarness(t, c)
			fillPool(t, w)
			var got nnv1.AgentClass
			_ = h.c.Get(ctx, types.NamespacedName{Namespace: "a", Name: "demo"}, &got)
			cond := meta.FindStatusCondition(got.Status.Conditions, ConditionSessionWarmPool)
			if cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, tc.field) {
				t.Fatalf("condition %+v, want False naming %s", cond, tc.field)
			}
			if n := len(warmPods(t, h.c)); n != 0 {
				t.Fatalf("%d warm pods of a bad class", n)
			}
		})
	}
}

// TestClaimedPodNotLostWhileCacheLags: right after the claim the session pod cache may not have
// the pod yet; the next reconcile reads it from the API server and keeps the session Running in
// it instead of taking it for lost.
func TestClaimedPodNotLostWhileCacheLags(t *testing.T) {
	s := newSession(0)
	s.UID = "s1-uid"
	h, w := warmHarness(t, pooledClass(1), s)
	fillPool(t, w)
	warm := warmPods(t, h.c)[0].Name
	h.ready(warm)
	h.r.Pods = fake.NewClientBuilder().WithScheme(h.r.Scheme).Build() // a cache that has seen nothing
	h.r.APIReader = h.c
	h.step(nnv1.SessionRunning)
	got := h.step(nnv1.SessionRunning)
	if got.Status.PodName != warm || got.Status.Pods != 1 {
		t.Fatalf("status %+v, want still in %s", got.Status, warm)
	}
}

// TestWarmPoolCountsPendingPods: pods created but not yet in the pod cache count as live, so a
// second reconcile before the cache catches up creates none; after pendingTTL they no longer count.
func TestWarmPoolCountsPendingPods(t *testing.T) {
	h, w := warmHarness(t, pooledClass(2))
	now := h.now
	w.Now = func() time.Time { return now }
	w.Pods = fake.NewClientBuilder().WithScheme(h.r.Scheme).Build() // a cache that has seen nothing
	fillPool(t, w)
	fillPool(t, w)
	var l corev1.PodList
	if err := h.c.List(context.Background(), &l, client.InNamespace("a")); err != nil || len(l.Items) != 2 {
		t.Fatalf("%d pods (%v), want 2: the pending ones were created again", len(l.Items), err)
	}
	now = now.Add(pendingTTL + time.Second)
	fillPool(t, w)
	if err := h.c.List(context.Background(), &l, client.InNamespace("a")); err != nil || len(l.Items) != 4 {
		t.Fatalf("%d pods (%v), want 4 once the pending ones expired unseen", len(l.Items), err)
	}
}

// TestWarmPoolReportsRefusedCreate: a warm pod the cluster refuses (admission, quota) leaves
// SessionWarmPool=False with the cluster's error, and the reconcile fails so it is retried.
func TestWarmPoolReportsRefusedCreate(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = nnv1.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pooledClass(1)).WithStatusSubresource(&nnv1.AgentClass{}).
		WithInterceptorFuncs(interceptor.Funcs{Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*corev1.Pod); ok {
				return errors.New("admission webhook denied the request")
			}
			return cl.Create(ctx, obj, opts...)
		}}).Build()
	w := &WarmPoolReconciler{Client: c, Scheme: scheme}
	if _, err := w.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "a", Name: "demo"}}); err == nil {
		t.Fatal("a refused create reconciled without error")
	}
	var got nnv1.AgentClass
	_ = c.Get(context.Background(), types.NamespacedName{Namespace: "a", Name: "demo"}, &got)
	cond := meta.FindStatusCondition(got.Status.Conditions, ConditionSessionWarmPool)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "CreateFailed" || !strings.Contains(cond.Message, "denied") {
		t.Fatalf("condition %+v, want False CreateFailed with the cluster's error", cond)
	}
}

// staleReader is a cache that still holds an older version of every AgentSession: the reconcile
// right after a claim, before the session's watch event arrived.
type staleReader struct {
	client.Client
	old map[types.NamespacedName]*nnv1.AgentSession
}

func (s staleReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if o, ok := s.old[key]; ok {
		if out, ok := obj.(*nnv1.AgentSession); ok {
			o.DeepCopyInto(out)
			return nil
		}
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

// TestClaimNotRepeatedOnStaleSession: a reconcile that reads the session from a cache that has
// not seen the claim's status (phase empty again) neither claims nor creates a pod; once the
// cache catches up the session stays in its warm pod.
func TestClaimNotRepeatedOnStaleSession(t *testing.T) {
	s := newSession(0)
	s.UID = "s1-uid"
	h, w := warmHarness(t, pooledClass(2), s)
	fillPool(t, w)
	for _, p := range warmPods(t, h.c) {
		h.ready(p.Name)
	}
	before := h.session().DeepCopy()
	h.r.APIReader = h.c
	claimed := h.step(nnv1.SessionRunning)
	live := h.c
	h.r.Client = staleReader{Client: live, old: map[types.NamespacedName]*nnv1.AgentSession{{Namespace: "a", Name: "s1"}: before}}
	res, err := h.reconcile()
	if err != nil || res.RequeueAfter == 0 {
		t.Fatalf("stale reconcile: %+v, %v; want a requeue", res, err)
	}
	var l corev1.PodList
	if err := live.List(context.Background(), &l, client.InNamespace("a"), client.MatchingLabels{nnv1.SessionLabel: "s1"}); err != nil || len(l.Items) != 1 || l.Items[0].Name != claimed.Status.PodName {
		t.Fatalf("session pods %d (%v), want only the claimed %s", len(l.Items), err, claimed.Status.PodName)
	}
	h.r.Client = live
	if got := h.step(nnv1.SessionRunning); got.Status.PodName != claimed.Status.PodName || got.Status.Pods != 1 {
		t.Fatalf("status %+v, want still in %s", got.Status, claimed.Status.PodName)
	}
}

// TestReclaimRetiresLostPodsServiceAccount: a session that claimed a warm pod and lost it without
// a checkpoint claims a second warm pod and runs as its ServiceAccount; the first pod's, which the
// session owned, is deleted by the next reconcile, and the second is kept.
func TestReclaimRetiresLostPodsServiceAccount(t *testing.T) {
	s := newSession(0)
	s.UID = "s1-uid"
	h, w := warmHarness(t, pooledClass(2), s)
	ctx := context.Background()
	fillPool(t, w)
	for _, p := range warmPods(t, h.c) {
		h.ready(p.Name)
	}
	first := h.step(nnv1.SessionRunning).Status.PodName
	h.step(nnv1.SessionRunning) // adopts the first pod's ServiceAccount
	if err := h.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: first}}); err != nil {
		t.Fatal(err)
	}
	got := h.step(nnv1.SessionRunning) // lost without a checkpoint: claims the other warm pod
	second := got.Status.PodName
	if second == first || got.Status.ServiceAccountName != second || len(got.Status.RetiredServiceAccountNames) != 1 || got.Status.RetiredServiceAccountNames[0] != first {
		t.Fatalf("after the re-claim: pod %s as %q, retired %v; want the other warm pod, %s retired", second, got.Status.ServiceAccountName, got.Status.RetiredServiceAccountNames, first)
	}
	got = h.step(nnv1.SessionRunning)
	if h.serviceAccountExists(first) || !h.serviceAccountExists(second) || len(got.Status.RetiredServiceAccountNames) != 0 {
		t.Fatalf("%s exists %v, %s exists %v, retired %v; want the first deleted, the second kept", first, h.serviceAccountExists(first), second, h.serviceAccountExists(second), got.Status.RetiredServiceAccountNames)
	}
}
