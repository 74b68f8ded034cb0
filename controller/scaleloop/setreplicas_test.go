package scaleloop

import (
	"context"
	"errors"
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
)

// TestSetReplicasRefusesAStaleDecision: a decision made on a pool read at 2 replicas is not
// written over a scale to 6 made since; one made on the current count is.
func TestSetReplicasRefusesAStaleDecision(t *testing.T) {
	for _, tc := range []struct {
		name        string
		read, scale int32
		wantErr     bool
	}{{"scaled since the read", 2, 6, true}, {"unchanged", 6, 6, false}} {
		t.Run(tc.name, func(t *testing.T) {
			var updated []int32
			c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithInterceptorFuncs(interceptor.Funcs{
				SubResourceGet: func(_ context.Context, _ client.Client, sub string, _ client.Object, obj client.Object, _ ...client.SubResourceGetOption) error {
					obj.(*autoscalingv1.Scale).Spec.Replicas = tc.scale
					return nil
				},
				SubResourceUpdate: func(_ context.Context, _ client.Client, sub string, _ client.Object, opts ...client.SubResourceUpdateOption) error {
					o := &client.SubResourceUpdateOptions{}
					o.ApplyOptions(opts)
					updated = append(updated, o.SubResourceBody.(*autoscalingv1.Scale).Spec.Replicas)
					return nil
				},
			}).Build()
			pool := &v1alpha1.AgentPool{}
			pool.Namespace, pool.Name, pool.Spec.Replicas = "ns", "pool", &tc.read
			err := ScaleSubresource{Client: c}.SetReplicas(context.Background(), pool, 4)
			if tc.wantErr {
				if !errors.Is(err, ErrReplicasChanged) || len(updated) != 0 {
					t.Fatalf("err %v, writes %v; want ErrReplicasChanged and no write", err, updated)
				}
				return
			}
			if err != nil || len(updated) != 1 || updated[0] != 4 {
				t.Fatalf("err %v, writes %v; want one write of 4", err, updated)
			}
		})
	}
}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}
