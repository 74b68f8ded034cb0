package scoring

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// replicaA and replicaB are two gateway replicas' views of one pool (gateway/metrics PoolStats).
const replicaA = `# TYPE neuronetes_concurrent_sessions gauge
neuronetes_concurrent_sessions{pod="p1",scope="shared"} 4
neuronetes_concurrent_sessions{pod="p2",scope="shared"} 0
# TYPE neuronetes_tokens_in_queue gauge
neuronetes_tokens_in_queue{pod=""} 10
neuronetes_tokens_in_queue{pod="p1"} 500
`
const replicaB = `# TYPE neuronetes_concurrent_sessions gauge
neuronetes_concurrent_sessions{pod="p1",scope="shared"} 4
neuronetes_concurrent_sessions{pod="p3",scope="replica"} 2
`

func TestMergePoolLoad(t *testing.T) {
	var l PoolLoad
	for _, body := range []string{replicaA, replicaB, replicaB} {
		if err := MergePoolLoad(&l, strings.NewReader(body)); err != nil {
			t.Fatal(err)
		}
	}
	for pod, want := range map[string]float64{"p1": 4, "p2": 0, "p3": 4, "p9": 0} {
		if got := l.Sessions(pod); got != want {
			t.Errorf("Sessions(%s) = %v, want %v (shared once, replica-local summed)", pod, got, want)
		}
	}
	if err := MergePoolLoad(&l, strings.NewReader("not metrics {")); err == nil {
		t.Error("malformed view: no error")
	}
	if (*PoolLoad)(nil).Sessions("p1") != 0 {
		t.Error("nil load has sessions")
	}
}

func TestHeadroomRaw(t *testing.T) {
	var l PoolLoad
	if err := MergePoolLoad(&l, strings.NewReader(replicaA+"neuronetes_concurrent_sessions{pod=\"p3\",scope=\"replica\"} 2\n")); err != nil {
		t.Fatal(err)
	}
	pod := func(ns, name, pool string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{nnv1.PoolLabel: pool}}}
	}
	busy := []*corev1.Pod{pod("a", "p1", "pool")}                           // 1 replica, 4 sessions
	idle := []*corev1.Pod{pod("a", "p2", "pool"), pod("a", "p3", "pool")}   // 2 replicas, 2 sessions
	mixed := []*corev1.Pod{pod("a", "p1", "other"), pod("b", "p1", "pool")} // none of a/pool
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		load *PoolLoad
		want int64
	}{
		{"busy replica counts its sessions", busy, &l, 5},
		{"idle replicas", idle, &l, 4},
		{"without load: replicas", busy, nil, 1},
		{"without load: replicas (2)", idle, nil, 2},
		{"other pools and namespaces", mixed, &l, 0},
	} {
		if got := HeadroomRaw("a", "pool", tc.pods, tc.load); got != tc.want {
			t.Errorf("%s: HeadroomRaw = %d, want %d", tc.name, got, tc.want)
		}
	}
	if HeadroomRaw("a", "", busy, &l) != 0 {
		t.Error("a pod of no pool scores load")
	}
}
