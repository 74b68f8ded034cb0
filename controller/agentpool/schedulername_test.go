package agentpool

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/warmpool"
)

// TestBuildPodKeepsSchedulerName: an AgentClass selects neuronetes-scheduler's profile through its
// pod template (spec.template.spec.schedulerName: neuronetes); serving and warm pods keep it, next
// to the warm-node preference the profile's NeuroNetesModelCache reads.
func TestBuildPodKeepsSchedulerName(t *testing.T) {
	for _, tc := range []struct{ name, want string }{{"neuronetes", "neuronetes"}, {"", ""}} {
		class := &nnv1.AgentClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: nnv1.AgentClassSpec{Template: &corev1.PodTemplateSpec{
			Spec: corev1.PodSpec{SchedulerName: tc.name, Containers: []corev1.Container{{Name: "agent", Image: "x"}}}}}}
		pool := &nnv1.AgentPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
		for _, st := range []warmpool.State{warmpool.Serving, warmpool.Warm} {
			pod, err := buildPod(pool, "p-0", st, podBuild{class: class, warmNodeLabel: nnv1.WarmNodeLabel("sha256:ab")})
			if err != nil {
				t.Fatal(err)
			}
			if pod.Spec.SchedulerName != tc.want {
				t.Errorf("%s pod: schedulerName %q, want %q", st, pod.Spec.SchedulerName, tc.want)
			}
		}
	}
}
