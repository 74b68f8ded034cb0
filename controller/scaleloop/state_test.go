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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// TestLoopRestartMidDay: a controller restart (a new Loop, a new process's memory) in the middle of
// the day resumes the day's spend and the stabilization history from the pool's state ConfigMap:
// the daily budget is enforced when the sum of both processes' spend reaches it, and the
// scale-down window keeps holding. A fresh Loop without the store would see neither.
func TestLoopRestartMidDay(t *testing.T) {
	sessions := 8.0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# TYPE neuronetes_concurrent_sessions gauge\nneuronetes_concurrent_sessions %g\n", sessions)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	class := &v1alpha1.AgentClass{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}, Spec: v1alpha1.AgentClassSpec{CostPerReplicaHour: "1"}}
	pool := &v1alpha1.AgentPool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "ns", UID: "uid-1", Generation: 1},
		Spec: v1alpha1.AgentPoolSpec{AgentClassRef: &v1alpha1.LocalObjectReference{Name: "c"}, Replicas: i32p(4), MinReplicas: i32p(1), MaxReplicas: i32p(10),
			Autoscaling: &v1alpha1.AutoscalingSpec{
				Metrics:         []v1alpha1.MetricSpec{{Type: v1alpha1.MetricConcurrentSessions, Target: "8", AveragingWindow: "1s"}},
				Behavior:        &v1alpha1.ScalingBehavior{ScaleDown: &v1alpha1.ScalingRules{StabilizationWindow: "10m"}},
				CostConstraints: &v1alpha1.CostConstraints{DailyBudget: "10", OnBudgetExceeded: []v1alpha1.BudgetAction{"scale-to-min"}}}},
		Status: v1alpha1.AgentPoolStatus{Replicas: 4},
	}
	pods := []*corev1.Pod{servingPod("a", port), servingPod("b", port), servingPod("c", port), servingPod("d", port)}
	c, w, rec := newEnv(t, pool, class, pods[0], pods[1], pods[2], pods[3])
	key := types.NamespacedName{Namespace: "ns", Name: "pool"}
	now := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	newLoop := func(persist bool) *Loop {
		l := &Loop{Client: c, Writer: w, Recorder: rec, Scraper: Scraper{}, Now: func() time.Time { return now }, SyncPeriod: 5 * time.Minute}
		if persist {
			l.State = &ConfigMapStore{Client: c}
		}
		return l
	}
	run := func(l *Loop, d time.Duration) {
		t.Helper()
		for end := now.Add(d); now.Before(end); now = now.Add(5 * time.Minute) {
			if _, err := l.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Two hours at 4 replicas (1 $ each per hour): 8 $ of the 10 $ budget.
	run(newLoop(true), 2*time.Hour)
	if got := specReplicas(t, c, key); got != 4 {
		t.Fatalf("before the restart: replicas %d, want 4 (events %s)", got, events(rec))
	}
	var cm corev1.ConfigMap
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: StateConfigMapName("pool")}, &cm); err != nil {
		t.Fatalf("no state ConfigMap: %v", err)
	}
	if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != "uid-1" {
		t.Errorf("state ConfigMap owners %+v, want the pool", cm.OwnerReferences)
	}
	// Restart. The load drops to nothing: the 10-minute scale-down window still holds 4 for
	// the first evaluations of the new process, as it would have in the old one.
	sessions = 0
	l := newLoop(true)
	run(l, 5*time.Minute)
	if got := specReplicas(t, c, key); got != 4 {
		t.Fatalf("right after the restart: replicas %d, want 4 held by the restored scale-down window", got)
	}
	// 30 more minutes at 4 replicas reach 10 $: the budget's scale-to-min applies.
	sessions = 8
	run(l, 30*time.Minute)
	if got := specReplicas(t, c, key); got != 1 {
		t.Fatalf("after the restart and 10.3 $ spent: replicas %d, want min 1 (events %s)", got, events(rec))
	}

	// Without the store, the same restart forgets the spend and the window.
	p := pool.DeepCopy()
	if err := c.Get(context.Background(), key, p); err != nil {
		t.Fatal(err)
	}
	p.Spec.Replicas = i32p(4)
	if err := c.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	sessions = 0
	run(newLoop(false), 5*time.Minute)
	if got := specReplicas(t, c, key); got != 1 {
		t.Fatalf("a fresh loop without history: replicas %d, want the immediate scale-down to 1", got)
	}
}

// TestStateConfigMapChecks: a state ConfigMap whose checksum does not match is refused, naming it.
func TestStateConfigMapChecks(t *testing.T) {
	st := &PoolState{Version: StateVersion, PoolUID: "u", Replicas: 3}
	cm, err := encodeState(st)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := decodeState(cm); err != nil || got.Replicas != 3 {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	cm.BinaryData[stateKey][len(cm.BinaryData[stateKey])-1] ^= 1
	if _, err := decodeState(cm); err == nil || !strings.Contains(err.Error(), checksumKey) {
		t.Fatalf("tampered state: %v", err)
	}
	cm.Data[versionKey] = "0"
	if _, err := decodeState(cm); err == nil || !strings.Contains(err.Error(), versionKey) {
		t.Fatalf("old version: %v", err)
	}
}
