package agentpool

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

func newScheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, resourcev1.AddToScheme, nnv1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func testClass(gpu *nnv1.GPURequest) *nnv1.AgentClass {
	return &nnv1.AgentClass{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns"},
		Spec: nnv1.AgentClassSpec{
			ModelRef: &nnv1.LocalObjectReference{Name: "m"},
			GPU:      gpu,
			Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "agent", Image: "neuronetes.local/demo-agent:dev", Ports: []corev1.ContainerPort{{ContainerPort: 8000}},
			}}}},
		},
	}
}

func testPool(replicas int32) *nnv1.AgentPool {
	return &nnv1.AgentPool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "ns", UID: "pool-uid", Generation: 1},
		Spec: nnv1.AgentPoolSpec{
			AgentClassRef: &nnv1.LocalObjectReference{Name: "demo"},
			Replicas:      ptr.To(replicas), MinReplicas: ptr.To[int32](2), MaxReplicas: ptr.To[int32](10),
			PrewarmPercent: ptr.To[int32](20),
			Autoscaling:    &nnv1.AutoscalingSpec{ReplenishStrategy: &nnv1.ReplenishStrategy{Delay: "10s", BatchSize: ptr.To[int32](1)}},
		},
	}
}

type harness struct {
	t   *testing.T
	c   client.Client
	r   *Reconciler
	now time.Time
}

func newHarness(t *testing.T, objs ...client.Object) *harness {
	s := newScheme(t)
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&nnv1.AgentPool{}).Build()
	h := &harness{t: t, c: c, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	h.r = &Reconciler{Client: c, Scheme: s, Metrics: NewMetrics(nil), Now: func() time.Time { return h.now }}
	return h
}

func (h *harness) reconcile() ctrl.Result {
	h.t.Helper()
	res, err := h.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "pool"}})
	if err != nil {
		h.t.Fatalf("reconcile: %v", err)
	}
	return res
}

// pods returns live pod names by state and marks every pod Ready (the kubelet's job).
func (h *harness) pods() map[string][]string {
	h.t.Helper()
	var l corev1.PodList
	if err := h.c.List(context.Background(), &l, client.InNamespace("ns")); err != nil {
		h.t.Fatal(err)
	}
	out := map[string][]string{}
	for i := range l.Items {
		p := &l.Items[i]
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		out[p.Labels[nnv1.StateLabel]] = append(out[p.Labels[nnv1.StateLabel]], p.Name)
		if !podReady(p) {
			p.Status.Phase = corev1.PodRunning
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
			if err := h.c.Status().Update(context.Background(), p); err != nil {
				h.t.Fatal(err)
			}
		}
	}
	return out
}

func (h *harness) pool() *nnv1.AgentPool {
	var p nnv1.AgentPool
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "pool"}, &p); err != nil {
		h.t.Fatal(err)
	}
	return &p
}

func TestReconcileWarmPoolLifecycle(t *testing.T) {
	digest := "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	model := &nnv1.Model{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns"}, Spec: nnv1.ModelSpec{Digest: digest}}
	h := newHarness(t, testClass(&nnv1.GPURequest{Count: 1, MIGProfile: "1g.10gb"}), testPool(2), model)

	h.reconcile()
	got := h.pods()
	if len(got["serving"]) != 2 || len(got["warm"]) != 2 {
		t.Fatalf("initial pods = %v, want 2 serving and 2 warm", got)
	}
	// Pod shape: labels, claim, affinity, grace.
	var p corev1.Pod
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: got["warm"][0]}, &p); err != nil {
		t.Fatal(err)
	}
	if p.Labels[nnv1.AgentClassLabel] != "demo" || p.Labels[nnv1.PoolLabel] != "pool" {
		t.Errorf("labels = %v", p.Labels)
	}
	if len(p.Spec.ResourceClaims) != 1 || *p.Spec.ResourceClaims[0].ResourceClaimTemplateName != "demo-gpu" ||
		len(p.Spec.Containers[0].Resources.Claims) != 1 {
		t.Errorf("claims = %+v / %+v", p.Spec.ResourceClaims, p.Spec.Containers[0].Resources.Claims)
	}
	pref := p.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	if len(pref) != 1 || pref[0].Preference.MatchExpressions[0].Key != nnv1.WarmNodeLabel(digest) {
		t.Errorf("affinity = %+v", pref)
	}
	var tmpl resourcev1.ResourceClaimTemplate
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "demo-gpu"}, &tmpl); err != nil {
		t.Fatalf("claim template: %v", err)
	}
	if dc := tmpl.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName; dc != "mig-1g.10gb.neuronetes.io" {
		t.Errorf("device class = %q", dc)
	}
	var svc corev1.Service
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "pool"}, &svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Selector[nnv1.StateLabel] != "serving" || svc.Spec.Ports[0].Port != 8000 {
		t.Errorf("service = %+v", svc.Spec)
	}
	h.reconcile()
	if st := h.pool().Status; st.Replicas != 2 || st.ReadyReplicas != 2 || st.WarmReplicas != 2 || st.WarmTarget != 2 {
		t.Fatalf("status = %+v", st)
	}

	// Scale to 4: the two warm pods become serving, nothing is created.
	warmBefore := got["warm"]
	pool := h.pool()
	pool.Spec.Replicas = ptr.To[int32](4)
	if err := h.c.Update(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	res := h.reconcile()
	got = h.pods()
	if len(got["serving"]) != 4 || len(got["warm"]) != 0 {
		t.Fatalf("after scale pods = %v, want 4 serving 0 warm", got)
	}
	for _, w := range warmBefore {
		if !contains(got["serving"], w) {
			t.Errorf("warm pod %s was not activated (serving=%v)", w, got["serving"])
		}
	}
	if res.RequeueAfter != 10*time.Second {
		t.Errorf("requeue = %v, want replenish delay 10s", res.RequeueAfter)
	}
	if st := h.pool().Status; st.WarmActivations != 2 || st.LastActivationTime == nil || st.DesiredReplicas != 4 {
		t.Errorf("status = %+v, want 2 activations and desiredReplicas 4 (it follows spec.replicas)", st)
	}

	// Before the delay nothing is replenished; after it, one pod per batch.
	h.now = h.now.Add(5 * time.Second)
	h.reconcile()
	if got = h.pods(); len(got["warm"]) != 0 {
		t.Fatalf("replenished before delay: %v", got)
	}
	h.now = h.now.Add(6 * time.Second)
	h.reconcile()
	if got = h.pods(); len(got["warm"]) != 1 {
		t.Fatalf("first batch: %v, want 1 warm", got)
	}
	h.reconcile()
	if got = h.pods(); len(got["warm"]) != 2 || len(got["serving"]) != 4 {
		t.Fatalf("second batch: %v, want 4 serving 2 warm", got)
	}

	// Scale down to 2: two serving pods drain and go away.
	pool = h.pool()
	pool.Spec.Replicas = ptr.To[int32](2)
	if err := h.c.Update(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	h.reconcile()
	if got = h.pods(); len(got["serving"]) != 2 || len(got["warm"]) != 2 {
		t.Fatalf("after scale down: %v", got)
	}
	if st := h.pool().Status; st.DesiredReplicas != 2 {
		t.Errorf("status.desiredReplicas = %d after the scale-down, want 2", st.DesiredReplicas)
	}
}

// TestReconcileRestartNoExtraPods simulates a controller that dies after creating part of a scale
// and a new one that starts with a fresh view: the total never exceeds desired + warm target.
func TestReconcileRestartNoExtraPods(t *testing.T) {
	h := newHarness(t, testClass(nil), testPool(2))
	h.reconcile()
	h.pods()
	pool := h.pool()
	pool.Spec.Replicas = ptr.To[int32](7)
	if err := h.c.Update(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 5; round++ {
		// A fresh reconciler each round: no in-memory state survives the "restart".
		h.r = &Reconciler{Client: h.c, Scheme: h.r.Scheme, Now: h.r.Now}
		h.reconcile()
		got := h.pods()
		total := len(got["serving"]) + len(got["warm"])
		if total > 7+2 {
			t.Fatalf("round %d: %d pods (%v) exceed desired 7 + warm 2", round, total, got)
		}
	}
	if got := h.pods(); len(got["serving"]) != 7 {
		t.Fatalf("serving = %v, want 7", got["serving"])
	}
}

func TestReconcileStaleCacheAlreadyExists(t *testing.T) {
	h := newHarness(t, testClass(nil), testPool(2))
	// A pod of slot 0 exists but is not owned/visible as pool pod: creation must not duplicate.
	h.reconcile()
	before := len(h.pods()["serving"])
	h.r.expected = nil
	h.reconcile()
	if after := len(h.pods()["serving"]); after != before {
		t.Fatalf("serving %d → %d on repeated reconcile", before, after)
	}
}

// TestReconcileStaleStatusNoEarlyReplenish simulates a cache that has not shown the status patch
// of an activation yet: the warm pool must still wait for the replenish delay.
func TestReconcileStaleStatusNoEarlyReplenish(t *testing.T) {
	h := newHarness(t, testClass(nil), testPool(2))
	h.reconcile()
	h.pods()
	pool := h.pool()
	pool.Spec.Replicas = ptr.To[int32](4)
	if err := h.c.Update(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	h.reconcile()
	// Roll the status back as a stale cache would show it.
	pool = h.pool()
	pool.Status.LastActivationTime = nil
	if err := h.c.Status().Update(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	h.now = h.now.Add(time.Second)
	h.reconcile()
	if got := h.pods(); len(got["warm"]) != 0 {
		t.Fatalf("warm pool refilled before the delay: %v", got)
	}
}

func TestReconcileMissingClass(t *testing.T) {
	h := newHarness(t, testPool(2))
	res := h.reconcile()
	if res.RequeueAfter == 0 {
		t.Error("want requeue while the class is missing")
	}
	if c := h.pool().Status.Conditions; len(c) == 0 || c[0].Reason != "AgentClassNotFound" {
		t.Errorf("conditions = %+v", c)
	}
}

func TestResolveSizing(t *testing.T) {
	tests := []struct {
		name                             string
		spec                             nnv1.AgentPoolSpec
		wantDesired, wantWarm, wantBatch int32
		wantDelay                        time.Duration
	}{
		{"defaults", nnv1.AgentPoolSpec{}, 1, 0, 1, 30 * time.Second},
		{"seed warm-pool", nnv1.AgentPoolSpec{MinReplicas: ptr.To[int32](5), MaxReplicas: ptr.To[int32](50), PrewarmPercent: ptr.To[int32](20),
			Autoscaling: &nnv1.AutoscalingSpec{UseWarmPool: ptr.To(true), ReplenishStrategy: &nnv1.ReplenishStrategy{Delay: "30s", BatchSize: ptr.To[int32](2)}}}, 5, 10, 2, 30 * time.Second},
		{"replicas clamped to max", nnv1.AgentPoolSpec{Replicas: ptr.To[int32](99), MaxReplicas: ptr.To[int32](4)}, 4, 0, 1, 30 * time.Second},
		{"replicas clamped to min", nnv1.AgentPoolSpec{Replicas: ptr.To[int32](0), MinReplicas: ptr.To[int32](2), MaxReplicas: ptr.To[int32](4)}, 2, 0, 1, 30 * time.Second},
		{"no maxReplicas: the shared default bound (10), as the autoscaler's", nnv1.AgentPoolSpec{Replicas: ptr.To[int32](7)}, 7, 0, 1, 30 * time.Second},
		{"no maxReplicas, minReplicas above the default", nnv1.AgentPoolSpec{Replicas: ptr.To[int32](99), MinReplicas: ptr.To[int32](12)}, 12, 0, 1, 30 * time.Second},
		{"warm pool off", nnv1.AgentPoolSpec{MaxReplicas: ptr.To[int32](10), PrewarmPercent: ptr.To[int32](50),
			Autoscaling: &nnv1.AutoscalingSpec{UseWarmPool: ptr.To(false)}}, 1, 0, 1, 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := resolveSizing(&tt.spec)
			if s.desired != tt.wantDesired || s.warmTarget != tt.wantWarm || s.batch != tt.wantBatch || s.delay != tt.wantDelay {
				t.Fatalf("resolveSizing = %+v", s)
			}
		})
	}
}

func TestDeviceClassFor(t *testing.T) {
	tests := []struct {
		g    nnv1.GPURequest
		want string
	}{
		{nnv1.GPURequest{}, "gpu.neuronetes.io"},
		{nnv1.GPURequest{MIGProfile: "1g.10gb"}, "mig-1g.10gb.neuronetes.io"},
		{nnv1.GPURequest{MIGProfile: "1g.5gb+me"}, "mig-1g.5gb-me.neuronetes.io"},
		{nnv1.GPURequest{DeviceClassName: "custom.example.com"}, "custom.example.com"},
	}
	for _, tt := range tests {
		if got := deviceClassFor(&tt.g); got != tt.want {
			t.Errorf("deviceClassFor(%+v) = %q, want %q", tt.g, got, tt.want)
		}
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func TestClassReconciler(t *testing.T) {
	tests := []struct {
		name        string
		gpu         *nnv1.GPURequest
		deviceClass bool
		wantTmpl    string
		wantStatus  metav1.ConditionStatus
		wantMatch   string // the matchAttribute constraint over the GPU request; "" for none
	}{
		{"no gpu", nil, false, "", "", ""},
		{"gpu without device class", &nnv1.GPURequest{Count: 2}, false, "demo-gpu", metav1.ConditionFalse, ""},
		{"gpu with device class", &nnv1.GPURequest{Count: 1}, true, "demo-gpu", metav1.ConditionTrue, ""},
		{"numa aligned", &nnv1.GPURequest{Count: 4, Alignment: nnv1.GPUAlignmentNUMANode}, true, "demo-gpu", metav1.ConditionTrue, "resource.kubernetes.io/numaNode"},
		{"nvlink aligned", &nnv1.GPURequest{Count: 2, Alignment: nnv1.GPUAlignmentNVLinkDomain}, true, "demo-gpu", metav1.ConditionTrue, "gpu.neuronetes.io/nvlinkDomain"},
		{"one aligned gpu needs no constraint", &nnv1.GPURequest{Count: 1, Alignment: nnv1.GPUAlignmentNUMANode}, true, "demo-gpu", metav1.ConditionTrue, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := []client.Object{testClass(tt.gpu)}
			if tt.deviceClass {
				objs = append(objs, &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: GPUDeviceClass}})
			}
			s := newScheme(t)
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&nnv1.AgentClass{}).Build()
			r := &ClassReconciler{Client: c, Scheme: s}
			if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "demo"}}); err != nil {
				t.Fatal(err)
			}
			var got nnv1.AgentClass
			if err := c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "demo"}, &got); err != nil {
				t.Fatal(err)
			}
			if got.Status.ResourceClaimTemplateName != tt.wantTmpl {
				t.Errorf("template = %q, want %q", got.Status.ResourceClaimTemplateName, tt.wantTmpl)
			}
			var status metav1.ConditionStatus
			for _, cnd := range got.Status.Conditions {
				if cnd.Type == ClassConditionDeviceClass {
					status = cnd.Status
				}
			}
			if status != tt.wantStatus {
				t.Errorf("condition = %q, want %q", status, tt.wantStatus)
			}
			if tt.gpu != nil {
				var tmpl resourcev1.ResourceClaimTemplate
				if err := c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "demo-gpu"}, &tmpl); err != nil {
					t.Fatal(err)
				}
				if n := tmpl.Spec.Spec.Devices.Requests[0].Exactly.Count; n != int64(tt.gpu.Count) {
					t.Errorf("count = %d", n)
				}
				var match string
				for _, c := range tmpl.Spec.Spec.Devices.Constraints {
					if c.MatchAttribute != nil && slices.Equal(c.Requests, []string{GPUClaimName}) {
						match = string(*c.MatchAttribute)
					}
				}
				if match != tt.wantMatch || len(tmpl.Spec.Spec.Devices.Constraints) > 1 {
					t.Errorf("constraints = %+v, want matchAttribute %q", tmpl.Spec.Spec.Devices.Constraints, tt.wantMatch)
				}
			}
		})
	}
}

// TestReconcileWarmRestoreRefusesForeignSource: a class whose template names another
// namespace's checkpoint gets no Restore AgentCheckpoint (the controller's rights never read
// another namespace's images); its warm pods cold-start and count as warm.
func TestReconcileWarmRestoreRefusesForeignSource(t *testing.T) {
	for _, from := range []string{"demo/victim.ck-1", "victim/demo/victim.ck-1", "demo/ck-1"} {
		t.Run(from, func(t *testing.T) {
			class := testClass(nil)
			class.Spec.Template.Annotations = map[string]string{nnv1.RestoreFromAnnotation: from}
			h := newHarness(t, class, testPool(2))
			h.r.Checkpoints = true
			h.reconcile()
			h.pods()
			h.reconcile()
			var cks nnv1.AgentCheckpointList
			if err := h.c.List(context.Background(), &cks); err != nil {
				t.Fatal(err)
			}
			if len(cks.Items) != 0 {
				t.Fatalf("agentcheckpoints = %+v, want none for restore-from %q", cks.Items, from)
			}
			if st := h.pool().Status; st.WarmReplicas != 2 {
				t.Errorf("warmReplicas = %d, want 2 (cold-started)", st.WarmReplicas)
			}
		})
	}
}

// TestReconcileWarmRestore checks the warm-pool restore contract: warm pods of a class whose
// template asks for a restore get a Restore AgentCheckpoint and count as warm only once it
// finished; serving pods are not restored.
func TestReconcileWarmRestore(t *testing.T) {
	class := testClass(nil)
	class.Spec.Template.Annotations = map[string]string{nnv1.RestoreFromAnnotation: "demo/ns.ck-1"}
	h := newHarness(t, class, testPool(2))
	h.r.Checkpoints = true
	h.reconcile()
	got := h.pods() // marks every pod Running and Ready
	h.reconcile()
	var cks nnv1.AgentCheckpointList
	if err := h.c.List(context.Background(), &cks, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	if len(cks.Items) != 2 {
		t.Fatalf("agentcheckpoints = %d, want one per warm pod (%v)", len(cks.Items), got)
	}
	for _, ck := range cks.Items {
		if ck.Spec.Operation != nnv1.RestoreOperation || ck.Spec.Agent != "demo" || ck.Spec.CheckpointID != "ns.ck-1" ||
			!contains(got["warm"], ck.Spec.Target.Pod) || ck.Labels[nnv1.PoolLabel] != "pool" {
			t.Errorf("agentcheckpoint = %+v", ck.Spec)
		}
	}
	for _, name := range got["serving"] {
		var p corev1.Pod
		if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		if _, ok := p.Annotations[nnv1.RestoreFromAnnotation]; ok {
			t.Errorf("serving pod %s carries the restore annotation", name)
		}
	}
	if st := h.pool().Status; st.WarmReplicas != 0 {
		t.Fatalf("warmReplicas = %d before the restores finished, want 0", st.WarmReplicas)
	}
	for i := range cks.Items {
		cks.Items[i].Status.Phase = nnv1.AgentCheckpointSucceeded
		if i == 1 {
			cks.Items[i].Status.Phase = nnv1.AgentCheckpointFailed // cold-started: still warm-ready
		}
		if err := h.c.Update(context.Background(), &cks.Items[i]); err != nil {
			t.Fatal(err)
		}
	}
	h.reconcile()
	if st := h.pool().Status; st.WarmReplicas != 2 {
		t.Fatalf("warmReplicas = %d after the restores, want 2", st.WarmReplicas)
	}
}

// TestClassReconcilerRewritesChangedTemplate: a ResourceClaimTemplate's spec is immutable, so a
// class whose GPU request changes gets its template deleted and written anew (an update would be
// refused by the apiserver for ever), and an unchanged class keeps the same template object.
func TestClassReconcilerRewritesChangedTemplate(t *testing.T) {
	s := newScheme(t)
	deletes := 0
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(testClass(&nnv1.GPURequest{Count: 2})).
		WithStatusSubresource(&nnv1.AgentClass{}).WithInterceptorFuncs(interceptor.Funcs{
		// The apiserver refuses any update of a template's spec (ValidateResourceClaimTemplateUpdate).
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, ok := obj.(*resourcev1.ResourceClaimTemplate); ok {
				return apierrors.NewInvalid(resourcev1.SchemeGroupVersion.WithKind("ResourceClaimTemplate").GroupKind(), obj.GetName(), nil)
			}
			return c.Update(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if _, ok := obj.(*resourcev1.ResourceClaimTemplate); ok {
				deletes++
			}
			return c.Delete(ctx, obj, opts...)
		},
	}).Build()
	r := &ClassReconciler{Client: c, Scheme: s}
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "ns", Name: "demo"}
	tmplOf := func() resourcev1.ResourceClaimTemplate {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
		var tmpl resourcev1.ResourceClaimTemplate
		if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "demo-gpu"}, &tmpl); err != nil {
			t.Fatal(err)
		}
		return tmpl
	}
	first := tmplOf()
	if again := tmplOf(); again.ResourceVersion != first.ResourceVersion || deletes != 0 {
		t.Errorf("unchanged class rewrote its template: version %s -> %s, %d deletes", first.ResourceVersion, again.ResourceVersion, deletes)
	}
	var class nnv1.AgentClass
	if err := c.Get(ctx, key, &class); err != nil {
		t.Fatal(err)
	}
	class.Spec.GPU = &nnv1.GPURequest{Count: 4, Alignment: nnv1.GPUAlignmentNUMANode}
	if err := c.Update(ctx, &class); err != nil {
		t.Fatal(err)
	}
	changed := tmplOf()
	d := changed.Spec.Spec.Devices
	if d.Requests[0].Exactly.Count != 4 || len(d.Constraints) != 1 || deletes != 1 {
		t.Errorf("after the class changed: %d deletes, count %d, constraints %+v", deletes, d.Requests[0].Exactly.Count, d.Constraints)
	}
	if len(changed.OwnerReferences) != 1 || changed.OwnerReferences[0].Name != "demo" {
		t.Errorf("owner references %+v", changed.OwnerReferences)
	}
}
