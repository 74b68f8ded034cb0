package scaleloop

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/scaleapi"
)

// patchWriter stands in for the scale subresource (the fake client does not
// implement it for custom resources) by patching spec.replicas.
type patchWriter struct {
	c      client.Client
	writes []int32
}

func (w *patchWriter) SetReplicas(ctx context.Context, pool *v1alpha1.AgentPool, n int32) error {
	w.writes = append(w.writes, n)
	orig := pool.DeepCopy()
	pool.Spec.Replicas = &n
	return w.c.Patch(ctx, pool, client.MergeFrom(orig))
}

func i32p(v int32) *int32 { return &v }

func servingPod(name, port string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{v1alpha1.PoolLabel: "pool", v1alpha1.StateLabel: v1alpha1.PodStateServing},
			Annotations: map[string]string{MetricsPortAnnotation: port}},
		Status: corev1.PodStatus{PodIP: "127.0.0.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func newEnv(t *testing.T, objs ...client.Object) (client.Client, *patchWriter, *record.FakeRecorder) {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&v1alpha1.AgentPool{}, &v1alpha1.ToolBinding{}).Build()
	return c, &patchWriter{c: c}, record.NewFakeRecorder(100)
}

func events(r *record.FakeRecorder) string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return strings.Join(out, "\n")
		}
	}
}

func TestLoopScalesOnScrapedMetricsAndOverride(t *testing.T) {
	waiting := 20.0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting %g\n", waiting)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	pool := &v1alpha1.AgentPool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "ns", Generation: 1},
		Spec: v1alpha1.AgentPoolSpec{Replicas: i32p(2), MinReplicas: i32p(1), MaxReplicas: i32p(6),
			Autoscaling: &v1alpha1.AutoscalingSpec{Metrics: []v1alpha1.MetricSpec{{Type: v1alpha1.MetricQueueDepth, Target: "5", AveragingWindow: "1s"}}}},
		Status: v1alpha1.AgentPoolStatus{Replicas: 2, WarmReplicas: 1},
	}
	notReady := servingPod("c", port)
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	warm := servingPod("d", port)
	warm.Labels[v1alpha1.StateLabel] = v1alpha1.PodStateWarm
	c, w, rec := newEnv(t, pool, servingPod("a", port), servingPod("b", port), notReady, warm)
	reg := NewMetrics(nil)
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	l := &Loop{Client: c, Writer: w, Recorder: rec, Scraper: Scraper{}, Metrics: reg, Now: func() time.Time { return now }}
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "pool"}}

	steps := []struct {
		name      string
		waiting   float64
		override  *scaleapi.Override
		want      int32 // spec.replicas after the step
		wantEvent string
	}{
		{"2 ready pods at 20 waiting each, target 5 -> 8, capped at max 6", 20, nil, 6, "ScaledUp"},
		{"within tolerance holds", 5, nil, 6, "ScaleHeld"},
		{"webhook override", 5, &scaleapi.Override{Replicas: 3, Reason: "maintenance"}, 3, "maintenance"},
	}
	for _, s := range steps {
		waiting = s.waiting
		now = now.Add(15 * time.Second)
		if s.override != nil {
			s.override.Until = now.Add(time.Minute)
			setOverride(t, c, req.NamespacedName, *s.override)
		}
		res, err := l.Reconcile(context.Background(), req)
		if err != nil || res.RequeueAfter != DefaultSyncPeriod {
			t.Fatalf("%s: reconcile %v %v", s.name, res, err)
		}
		var got v1alpha1.AgentPool
		if err := c.Get(context.Background(), req.NamespacedName, &got); err != nil {
			t.Fatal(err)
		}
		if *got.Spec.Replicas != s.want {
			t.Fatalf("%s: replicas %d, want %d", s.name, *got.Spec.Replicas, s.want)
		}
		if ev := events(rec); !strings.Contains(ev, s.wantEvent) {
			t.Fatalf("%s: events %q lack %q", s.name, ev, s.wantEvent)
		}
	}
	if len(w.writes) != 2 {
		t.Fatalf("writes %v, want two scale operations", w.writes)
	}
	// Deleted pool: state forgotten, no error.
	if err := c.Delete(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reconcile(context.Background(), req); err != nil {
		t.Fatalf("reconcile of a deleted pool: %v", err)
	}
}

func TestLoopInvalidPolicyWarns(t *testing.T) {
	pool := &v1alpha1.AgentPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "ns"},
		Spec: v1alpha1.AgentPoolSpec{Autoscaling: &v1alpha1.AutoscalingSpec{Metrics: []v1alpha1.MetricSpec{{Type: "cpu", Target: "1"}}}}}
	c, w, rec := newEnv(t, pool)
	l := &Loop{Client: c, Writer: w, Recorder: rec}
	if _, err := l.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "pool"}}); err != nil {
		t.Fatal(err)
	}
	if ev := events(rec); !strings.Contains(ev, "Warning AutoscalingFailed") || !strings.Contains(ev, "metrics[0].type") {
		t.Fatalf("events %q", ev)
	}
	if len(w.writes) != 0 {
		t.Fatalf("invalid policy scaled: %v", w.writes)
	}
}

func TestLoopScalesOnNATSLag(t *testing.T) {
	url := startNATS(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "agent-tasks", Subjects: []string{"tasks"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	for i := range 150 {
		if _, err := js.Publish(ctx, "tasks", fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	pool := &v1alpha1.AgentPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "ns"},
		Spec: v1alpha1.AgentPoolSpec{Replicas: i32p(5), MaxReplicas: i32p(20), Autoscaling: &v1alpha1.AutoscalingSpec{}}}
	tb := &v1alpha1.ToolBinding{ObjectMeta: metav1.ObjectMeta{Name: "tb", Namespace: "ns"}, Spec: v1alpha1.ToolBindingSpec{Type: "queue",
		AgentPoolRef: &v1alpha1.LocalObjectReference{Name: "pool"},
		QueueConfig:  &v1alpha1.QueueConfig{Provider: "nats", QueueName: "agent-tasks", AutoscaleOnLag: true, MaxLagThreshold: i32p(100), PrefetchCount: i32p(10)}}}
	c, w, rec := newEnv(t, pool, tb)
	l := NewLoop(url, nil, nil)
	l.Client, l.Writer, l.Recorder = c, w, rec
	defer l.Lag.Close()
	if _, err := l.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "pool"}}); err != nil {
		t.Fatal(err)
	}
	// seed formula with target_throughput 1: 5 + ceil((150 - 5*10) / 10) = 15
	if len(w.writes) != 1 || w.writes[0] != 15 {
		t.Fatalf("writes %v, want [15]; events %s", w.writes, events(rec))
	}
	if ev := events(rec); !strings.Contains(ev, "QueueLag") {
		t.Fatalf("event lacks the reason: %q", ev)
	}
	var got v1alpha1.ToolBinding
	if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "tb"}, &got); err != nil || got.Status.Lag != 150 {
		t.Fatalf("toolbinding status.lag %d (%v), want 150", got.Status.Lag, err)
	}
}

func setOverride(t *testing.T, c client.Client, key types.NamespacedName, o scaleapi.Override) {
	t.Helper()
	var p v1alpha1.AgentPool
	if err := c.Get(context.Background(), key, &p); err != nil {
		t.Fatal(err)
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[scaleapi.OverrideAnnotation] = o.Encode()
	if err := c.Update(context.Background(), &p); err != nil {
		t.Fatal(err)
	}
}

func specReplicas(t *testing.T, c client.Client, key types.NamespacedName) int32 {
	t.Helper()
	var p v1alpha1.AgentPool
	if err := c.Get(context.Background(), key, &p); err != nil {
		t.Fatal(err)
	}
	return *p.Spec.Replicas
}

// TestLoopManualScaleOfAutoscaledPool: the autoscaler owns spec.replicas of an autoscaled pool.
// A value written by someone else (kubectl scale) is re-decided at once, not at the next period,
// and replaced by the decision with a ManualScaleOverridden Event; a /v1/scale override stored on
// the pool is applied at once, and removed once expired.
func TestLoopManualScaleOfAutoscaledPool(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "# TYPE neuronetes_concurrent_sessions gauge\nneuronetes_concurrent_sessions 0\n")
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	pool := &v1alpha1.AgentPool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "ns", Generation: 1},
		Spec: v1alpha1.AgentPoolSpec{Replicas: i32p(2), MinReplicas: i32p(2), MaxReplicas: i32p(6),
			Autoscaling: &v1alpha1.AutoscalingSpec{
				Metrics:  []v1alpha1.MetricSpec{{Type: v1alpha1.MetricConcurrentSessions, Target: "8", AveragingWindow: "1s"}},
				Behavior: &v1alpha1.ScalingBehavior{ScaleDown: &v1alpha1.ScalingRules{StabilizationWindow: "300s"}}}},
	}
	c, w, rec := newEnv(t, pool, servingPod("a", port), servingPod("b", port))
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	l := &Loop{Client: c, Writer: w, Recorder: rec, Scraper: Scraper{}, Now: func() time.Time { return now }}
	key := types.NamespacedName{Namespace: "ns", Name: "pool"}
	reconcile := func() {
		t.Helper()
		if _, err := l.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 { // an idle pool at its floor for a while
		reconcile()
		now = now.Add(15 * time.Second)
	}
	if got := specReplicas(t, c, key); got != 2 || len(w.writes) != 0 {
		t.Fatalf("idle pool: replicas %d writes %v", got, w.writes)
	}
	events(rec)

	// kubectl scale --replicas 4, one second after the last evaluation.
	now = now.Add(-14 * time.Second)
	p := pool.DeepCopy()
	if err := c.Get(context.Background(), key, p); err != nil {
		t.Fatal(err)
	}
	p.Spec.Replicas = i32p(4)
	if err := c.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	reconcile()
	if got := specReplicas(t, c, key); got != 2 {
		t.Fatalf("manual scale to 4 of an idle autoscaled pool: replicas %d right after, want the decision 2", got)
	}
	if ev := events(rec); !strings.Contains(ev, "Warning "+ManualScaleOverridden+" spec.replicas was set to 4 outside the autoscaler") ||
		!strings.Contains(ev, "spec.minReplicas") {
		t.Fatalf("events %q lack %s", ev, ManualScaleOverridden)
	}
	// The loop's own write comes back as a generation change: no second evaluation.
	n := len(w.writes)
	now = now.Add(time.Second)
	reconcile()
	if len(w.writes) != n {
		t.Fatalf("the echo of its own write was evaluated: writes %v", w.writes)
	}

	// POST /v1/scale stored an override on the pool: applied at once, past stabilization.
	now = now.Add(time.Second)
	setOverride(t, c, key, scaleapi.Override{Replicas: 5, Reason: "launch", Until: now.Add(30 * time.Second)})
	reconcile()
	if got := specReplicas(t, c, key); got != 5 {
		t.Fatalf("override to 5: replicas %d", got)
	}
	// Expired: the annotation goes, and the autoscaler decides again (scale-down stabilized at 5
	// for the window, as the HPA would).
	now = now.Add(31 * time.Second)
	reconcile()
	var got v1alpha1.AgentPool
	if err := c.Get(context.Background(), key, &got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Annotations[scaleapi.OverrideAnnotation]; ok {
		t.Fatalf("expired override kept: %v", got.Annotations)
	}
}

// TestBindingProviderCondition: a queue ToolBinding whose provider has no lag source (sqs, which
// the CRD now refuses, in objects stored before) gets ProviderServed=False saying so; nats, kafka
// and redis get True; a non-queue binding gets none.
func TestBindingProviderCondition(t *testing.T) {
	mk := func(name, typ, provider string) *v1alpha1.ToolBinding {
		b := &v1alpha1.ToolBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Generation: 1}, Spec: v1alpha1.ToolBindingSpec{Type: typ}}
		if provider != "" {
			b.Spec.QueueConfig = &v1alpha1.QueueConfig{Provider: provider, QueueName: "q", AutoscaleOnLag: true}
		}
		return b
	}
	c, _, _ := newEnv(t, mk("k", "queue", "kafka"), mk("s", "queue", "sqs"), mk("r", "queue", "redis"), mk("n", "queue", "nats"), mk("h", "http", ""))
	r := &BindingReconciler{Client: c}
	for _, tc := range []struct {
		name   string
		status metav1.ConditionStatus
		msg    string
	}{{"k", metav1.ConditionTrue, "reads the lag of kafka"}, {"s", metav1.ConditionFalse, "provider sqs is not served"},
		{"r", metav1.ConditionTrue, "reads the lag of redis"}, {"n", metav1.ConditionTrue, "reads the lag of nats"}, {"h", "", ""}} {
		key := types.NamespacedName{Namespace: "ns", Name: tc.name}
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
		var b v1alpha1.ToolBinding
		if err := c.Get(context.Background(), key, &b); err != nil {
			t.Fatal(err)
		}
		cond := apimeta.FindStatusCondition(b.Status.Conditions, ConditionProviderServed)
		switch {
		case tc.status == "" && cond != nil:
			t.Errorf("%s: condition %+v on a non-queue binding", tc.name, cond)
		case tc.status != "" && (cond == nil || cond.Status != tc.status || !strings.Contains(cond.Message, tc.msg)):
			t.Errorf("%s: condition %+v, want %s with %q", tc.name, cond, tc.status, tc.msg)
		}
	}
}

// TestSeenCompare: what makes the loop evaluate at once, and what counts as a manual scale.
func TestSeenCompare(t *testing.T) {
	pool := func(replicas *int32, min int32, ann string) *v1alpha1.AgentPool {
		p := &v1alpha1.AgentPool{Spec: v1alpha1.AgentPoolSpec{Replicas: replicas, MinReplicas: i32p(min), Autoscaling: &v1alpha1.AutoscalingSpec{}}}
		if ann != "" {
			p.Annotations = map[string]string{scaleapi.OverrideAnnotation: ann}
		}
		return p
	}
	base := pool(i32p(2), 2, "")
	s := seen{known: true, replicas: 2, spec: specDigest(base)}
	for _, tc := range []struct {
		name     string
		pool     *v1alpha1.AgentPool
		external bool
		now      bool
	}{
		{"unchanged (the echo of its own write)", pool(i32p(2), 2, ""), false, false},
		{"kubectl scale", pool(i32p(5), 2, ""), true, true},
		{"minReplicas raised", pool(i32p(2), 4, ""), false, true},
		{"unset replicas follows a raised minReplicas: a spec change, not a manual scale", pool(nil, 4, ""), false, true},
		{"scale override stored", pool(i32p(2), 2, `{"replicas":3}`), false, true},
	} {
		tr := s.compare(tc.pool)
		if tr.external != tc.external || (tr.reason != "") != tc.now {
			t.Errorf("%s: %+v, want external=%v now=%v", tc.name, tr, tc.external, tc.now)
		}
	}
	if tr := (seen{}).compare(base); tr.reason == "" || tr.external {
		t.Errorf("first evaluation: %+v", tr)
	}
}

// TestLoopSkipsPoolThroughSessions: a pool with spec.sessions (which the CRD refuses together
// with spec.autoscaling; an older CRD may not) is never scaled: no write, no event, no requeue.
func TestLoopSkipsPoolThroughSessions(t *testing.T) {
	pool := &v1alpha1.AgentPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "ns"},
		Spec: v1alpha1.AgentPoolSpec{Replicas: i32p(1), MinReplicas: i32p(3),
			Sessions:    &v1alpha1.PoolSessionsSpec{IdleTimeout: metav1.Duration{Duration: time.Minute}},
			Autoscaling: &v1alpha1.AutoscalingSpec{Metrics: []v1alpha1.MetricSpec{{Type: v1alpha1.MetricQueueDepth, Target: "5"}}}}}
	c, w, rec := newEnv(t, pool)
	l := &Loop{Client: c, Writer: w, Recorder: rec, Metrics: NewMetrics(nil)}
	res, err := l.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "pool"}})
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("reconcile %v %v", res, err)
	}
	if len(w.writes) != 0 || events(rec) != "" {
		t.Fatalf("pool through sessions scaled: writes %v", w.writes)
	}
}
