package rollout

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// gatewayReplica is a fake gateway /metrics with the series the real gateway exports (names
// from the api package, the contract both sides share).
type gatewayReplica struct {
	reqs   *prometheus.CounterVec
	ttft   *prometheus.HistogramVec
	safety *prometheus.CounterVec
	srv    *httptest.Server
}

func newReplica(t *testing.T) *gatewayReplica {
	reg := prometheus.NewRegistry()
	g := &gatewayReplica{
		reqs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: nnv1.RolloutRequestsMetric, Help: "h"},
			[]string{"namespace", "rollout", "step", "variant", "mode", "outcome"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: nnv1.RolloutTTFTMetric, Help: "h",
			Buckets: prometheus.ExponentialBuckets(0.005, 1.25, 43)}, []string{"namespace", "rollout", "step", "variant", "mode"}),
		safety: prometheus.NewCounterVec(prometheus.CounterOpts{Name: nnv1.RolloutSafetyMetric, Help: "h"},
			[]string{"namespace", "rollout", "step", "variant", "mode"}),
	}
	reg.MustRegister(g.reqs, g.ttft, g.safety)
	g.srv = httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(g.srv.Close)
	return g
}

// serve records n requests of a variant on a step, errors of them failing.
func (g *gatewayReplica) serve(step, variant, mode string, n, errors int, ttft float64) {
	for i := 0; i < n; i++ {
		outcome := "ok"
		if i < errors {
			outcome = "error"
		} else {
			g.ttft.WithLabelValues("ns", "chat", step, variant, mode).Observe(ttft * (0.8 + 0.4*float64(i%10)/10))
		}
		g.reqs.WithLabelValues("ns", "chat", step, variant, mode, outcome).Inc()
	}
}

func setup(t *testing.T, objs ...client.Object) (*Reconciler, *record.FakeRecorder, *[]*gatewayReplica, *time.Time) {
	scheme := runtime.NewScheme()
	if err := nnv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&nnv1.AgentRollout{}).Build()
	reps := []*gatewayReplica{newReplica(t), newReplica(t)}
	rec := record.NewFakeRecorder(100)
	now := time.Unix(2_000_000, 0)
	r := &Reconciler{Client: c, Recorder: rec, Now: func() time.Time { return now },
		Source: &GatewayScraper{URLs: []string{reps[0].srv.URL, reps[1].srv.URL}}}
	return r, rec, &reps, &now
}

func objects() []client.Object {
	ro := &nnv1.AgentRollout{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "chat", Generation: 1},
		Spec: nnv1.AgentRolloutSpec{StablePool: nnv1.LocalObjectReference{Name: "v1"}, CanaryPool: nnv1.LocalObjectReference{Name: "v2"},
			Steps: []nnv1.RolloutStep{{Weight: 0, Mirror: 50, Pause: "30s"}, {Weight: 25, Pause: "30s"}, {Weight: 100}},
			Gate:  nnv1.RolloutGate{MinSamples: ptr(int32(100))}}}
	return []client.Object{ro,
		&nnv1.AgentPool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "v1"}},
		&nnv1.AgentPool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "v2"}}}
}

func ptr[T any](v T) *T { return &v }

func reconcileOnce(t *testing.T, r *Reconciler) *nnv1.AgentRollout {
	t.Helper()
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "chat"}}); err != nil {
		t.Fatal(err)
	}
	var ro nnv1.AgentRollout
	if err := r.Client.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "chat"}, &ro); err != nil {
		t.Fatal(err)
	}
	return &ro
}

func events(rec *record.FakeRecorder) string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return strings.Join(out, "\n")
		}
	}
}

func TestHealthyCanaryIsPromotedThroughAllSteps(t *testing.T) {
	r, rec, reps, now := setup(t, objects()...)
	ro := reconcileOnce(t, r)
	if ro.Status.Phase != nnv1.RolloutProgressing || ro.Status.Mirror != 50 || ro.Status.StepID != "1-0" {
		t.Fatalf("start: %+v", ro.Status)
	}
	// Shadow step: samples split over two replicas.
	(*reps)[0].serve("1-0", "stable", "live", 150, 1, 0.2)
	(*reps)[1].serve("1-0", "stable", "live", 150, 1, 0.2)
	(*reps)[0].serve("1-0", "canary", "shadow", 120, 1, 0.2)
	*now = now.Add(31 * time.Second)
	ro = reconcileOnce(t, r)
	if ro.Status.CurrentStep != 1 || ro.Status.CanaryWeight != 25 || ro.Status.Samples != nil {
		t.Fatalf("after shadow step: %+v", ro.Status)
	}
	(*reps)[1].serve("1-1", "stable", "live", 300, 2, 0.2)
	(*reps)[1].serve("1-1", "canary", "live", 110, 1, 0.21)
	*now = now.Add(31 * time.Second)
	ro = reconcileOnce(t, r)
	if ro.Status.Phase != nnv1.RolloutPromoted || ro.Status.CanaryWeight != 100 {
		t.Fatalf("promotion: %+v %+v", ro.Status, ro.Status.LastGate)
	}
	if ev := events(rec); !strings.Contains(ev, "Normal Promoted") || !strings.Contains(ev, "StepPassed") {
		t.Fatalf("events: %s", ev)
	}
	testDrain(t, r, rec, now)
}

// testDrain: a promoted rollout drains the stable pool after spec.drain.timeout (default 30m):
// status.drained, condition and Event Drained, the pool scaled to 0 once (a later scale-up by
// the user is left alone).
func testDrain(t *testing.T, r *Reconciler, rec *record.FakeRecorder, now *time.Time) {
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "ns", Name: "v1"}
	var pool nnv1.AgentPool
	if err := r.Client.Get(ctx, key, &pool); err != nil {
		t.Fatal(err)
	}
	pool.Spec.Replicas, pool.Spec.MinReplicas = ptr(int32(3)), ptr(int32(2))
	if err := r.Client.Update(ctx, &pool); err != nil {
		t.Fatal(err)
	}
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "chat"}}
	*now = now.Add(29 * time.Minute)
	res, err := r.Reconcile(ctx, req)
	if err != nil || res.RequeueAfter != time.Minute {
		t.Fatalf("before the drain timeout: %+v %v", res, err)
	}
	if err := r.Client.Get(ctx, key, &pool); err != nil || *pool.Spec.Replicas != 3 {
		t.Fatalf("scaled before the drain ended: %+v %v", pool.Spec, err)
	}
	*now = now.Add(time.Minute)
	if res, err = r.Reconcile(ctx, req); err != nil || res.RequeueAfter != 0 {
		t.Fatalf("drain: %+v %v", res, err)
	}
	var ro nnv1.AgentRollout
	if err := r.Client.Get(ctx, req.NamespacedName, &ro); err != nil || !ro.Status.Drained {
		t.Fatalf("not drained: %+v %v", ro.Status, err)
	}
	if err := r.Client.Get(ctx, key, &pool); err != nil || *pool.Spec.Replicas != 0 || *pool.Spec.MinReplicas != 0 {
		t.Fatalf("stable pool not scaled down: %+v %v", pool.Spec, err)
	}
	if ev := events(rec); !strings.Contains(ev, "Normal Drained") {
		t.Fatalf("events: %s", ev)
	}
	pool.Spec.Replicas = ptr(int32(1))
	if err := r.Client.Update(ctx, &pool); err != nil {
		t.Fatal(err)
	}
	*now = now.Add(time.Hour)
	reconcileOnce(t, r)
	if err := r.Client.Get(ctx, key, &pool); err != nil || *pool.Spec.Replicas != 1 {
		t.Fatalf("a drained pool scaled up again was scaled down: %+v %v", pool.Spec, err)
	}
}

func TestErroringCanaryIsRolledBack(t *testing.T) {
	r, rec, reps, now := setup(t, objects()...)
	reconcileOnce(t, r)
	(*reps)[0].serve("1-0", "stable", "live", 300, 2, 0.2)
	(*reps)[0].serve("1-0", "canary", "shadow", 150, 45, 0.2) // 30% errors
	*now = now.Add(5 * time.Second)
	ro := reconcileOnce(t, r)
	if ro.Status.Phase != nnv1.RolloutRolledBack || ro.Status.CanaryWeight != 0 || ro.Status.Mirror != 0 {
		t.Fatalf("%+v", ro.Status)
	}
	if ro.Status.LastGate == nil || ro.Status.LastGate.Verdict != "Fail" || ro.Status.Samples.Canary.Errors != 45 {
		t.Fatalf("gate: %+v samples %+v", ro.Status.LastGate, ro.Status.Samples)
	}
	found := false
	for _, c := range ro.Status.Conditions {
		found = found || c.Type == nnv1.RolloutConditionRolledBack && c.Status == metav1.ConditionTrue
	}
	if !found || !strings.Contains(events(rec), "Warning RolledBack") {
		t.Fatalf("conditions %+v", ro.Status.Conditions)
	}
}

func TestUnreadableReplicaHoldsTheGate(t *testing.T) {
	r, _, reps, now := setup(t, objects()...)
	reconcileOnce(t, r)
	(*reps)[0].serve("1-0", "canary", "shadow", 150, 100, 0.2)
	(*reps)[1].srv.Close() // one replica is down: no partial sums
	*now = now.Add(5 * time.Second)
	ro := reconcileOnce(t, r)
	if ro.Status.Phase != nnv1.RolloutProgressing || ro.Status.LastGate.Verdict != "Pending" {
		t.Fatalf("%+v", ro.Status)
	}
}

func TestMissingPoolIsInvalid(t *testing.T) {
	objs := objects()
	r, rec, _, _ := setup(t, objs[0], objs[1])
	ro := reconcileOnce(t, r)
	if len(ro.Status.Conditions) == 0 || ro.Status.Conditions[0].Type != ConditionInvalid || !strings.Contains(ro.Status.Conditions[0].Message, "spec.canaryPool") {
		t.Fatalf("%+v", ro.Status.Conditions)
	}
	if !strings.Contains(events(rec), "InvalidSpec") {
		t.Fatal("no InvalidSpec event")
	}
}

// TestPauseHoldsStepAndResumeJudges: pausing a rollout holds its step and samples (no restart),
// and the reconcile that resumes it judges the step's samples at once.
func TestPauseHoldsStepAndResumeJudges(t *testing.T) {
	r, _, reps, now := setup(t, objects()...)
	ctx := context.Background()
	reconcileOnce(t, r)
	(*reps)[0].serve("1-0", "stable", "live", 300, 2, 0.2)
	(*reps)[0].serve("1-0", "canary", "shadow", 150, 1, 0.2)
	edit := func(paused bool) *nnv1.AgentRollout {
		var ro nnv1.AgentRollout
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "chat"}, &ro); err != nil {
			t.Fatal(err)
		}
		ro.Spec.Paused = paused
		ro.Generation++
		if err := r.Client.Update(ctx, &ro); err != nil {
			t.Fatal(err)
		}
		*now = now.Add(10 * time.Second)
		return reconcileOnce(t, r)
	}
	ro := edit(true)
	if ro.Status.Phase != nnv1.RolloutPaused || ro.Status.StepID != "1-0" || ro.Status.Run != 1 {
		t.Fatalf("pause: %+v", ro.Status)
	}
	*now = now.Add(time.Minute) // the step's pause (30s) ends while paused
	ro = edit(false)
	if ro.Status.CurrentStep != 1 || ro.Status.Run != 1 || ro.Status.StepID == "1-0" {
		t.Fatalf("resume did not judge step 0's samples: %+v %+v", ro.Status, ro.Status.LastGate)
	}
	if c := meta.FindStatusCondition(ro.Status.Conditions, nnv1.RolloutConditionProgressing); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("Progressing condition after resume: %+v", c)
	}
}
