package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/route"
)

// TestEndpointAnnotationsStayOnThePod: a pod owner's port and metrics annotations cannot point
// the gateway's scrapes or requests at another host.
func TestEndpointAnnotationsStayOnThePod(t *testing.T) {
	pod := func(name string, ann map[string]string) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Annotations: ann,
				Labels: map[string]string{v1alpha1.PoolLabel: "p", v1alpha1.StateLabel: v1alpha1.PodStateServing}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{ContainerPort: 8000}}}}},
			Status: corev1.PodStatus{PodIP: "10.88.0.7", Phase: corev1.PodRunning,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
	}
	eps := endpointsByPool([]corev1.Pod{
		pod("plain", nil),
		pod("bad-metrics-path", map[string]string{metricsPathAnnotation: "@169.254.169.254/latest"}),
		pod("bad-metrics-port", map[string]string{metricsPortAnnotation: "80@169.254.169.254"}),
		pod("bad-api-port", map[string]string{PortAnnotation: "80@169.254.169.254"}),
		pod("kv", map[string]string{KVEventsPortAnnotation: "5557"}),
		pod("bad-kv", map[string]string{KVEventsPortAnnotation: "5557@169.254.169.254"}),
	})[route.PoolRef{Namespace: "ns", Name: "p"}]
	want := map[string]string{"plain": "http://10.88.0.7:8000/metrics", "bad-metrics-path": "", "bad-metrics-port": "",
		"kv": "http://10.88.0.7:8000/metrics", "bad-kv": "http://10.88.0.7:8000/metrics"}
	wantKV := map[string]string{"kv": "tcp://10.88.0.7:5557"}
	if len(eps) != len(want) {
		t.Fatalf("endpoints %+v, want %d (the bad API port unrouted)", eps, len(want))
	}
	for _, e := range eps {
		if e.MetricsURL != want[e.Pod] || e.Addr != "10.88.0.7:8000" {
			t.Errorf("%s: addr %q metrics %q, want metrics %q", e.Pod, e.Addr, e.MetricsURL, want[e.Pod])
		}
		if e.KVEvents != wantKV[e.Pod] {
			t.Errorf("%s: kv events %q, want %q", e.Pod, e.KVEvents, wantKV[e.Pod])
		}
	}
}
