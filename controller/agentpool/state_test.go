package agentpool

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/warmpool"
)

// TestSetStateGuards checks that a state change applies over unrelated updates (a newer
// resourceVersion, as the kubelet's status writes make) but fails when the cached state or the
// pod's identity is stale.
func TestSetStateGuards(t *testing.T) {
	tests := []struct {
		name string
		// mutate changes the stored pod after the reconciler's copy was read.
		mutate  func(p *corev1.Pod)
		to      warmpool.State
		wantErr bool
		want    string // stored state label after the call
	}{
		{name: "fresh copy", to: warmpool.Serving, want: "serving"},
		{name: "status updated meanwhile", mutate: func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }, to: warmpool.Serving, want: "serving"},
		{name: "other label added meanwhile", mutate: func(p *corev1.Pod) { p.Labels["x"] = "y" }, to: warmpool.Draining, want: "draining"},
		{name: "state changed meanwhile", mutate: func(p *corev1.Pod) { p.Labels[nnv1.StateLabel] = "draining" }, to: warmpool.Serving, wantErr: true, want: "draining"},
		{name: "pod recreated meanwhile", mutate: func(p *corev1.Pod) { p.UID = "other" }, to: warmpool.Serving, wantErr: true, want: "warm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1",
				Labels: map[string]string{nnv1.PoolLabel: "pool", nnv1.StateLabel: "warm"}}}
			h := newHarness(t, pod)
			ctx := context.Background()
			key := types.NamespacedName{Namespace: "ns", Name: "p"}
			var cached corev1.Pod
			if err := h.c.Get(ctx, key, &cached); err != nil {
				t.Fatal(err)
			}
			if tt.mutate != nil {
				stored := cached.DeepCopy()
				tt.mutate(stored)
				if stored.UID != cached.UID {
					// A recreated pod: same name, new UID.
					if err := h.c.Delete(ctx, &cached); err != nil {
						t.Fatal(err)
					}
					stored.ResourceVersion = ""
					if err := h.c.Create(ctx, stored); err != nil {
						t.Fatal(err)
					}
				} else if err := h.c.Update(ctx, stored); err != nil {
					t.Fatal(err)
				}
			}
			err := h.r.setState(ctx, &cached, tt.to)
			if (err != nil) != tt.wantErr {
				t.Fatalf("setState error %v, wantErr %v", err, tt.wantErr)
			}
			var got corev1.Pod
			if err := h.c.Get(ctx, key, &got); err != nil {
				t.Fatal(err)
			}
			if got.Labels[nnv1.StateLabel] != tt.want {
				t.Errorf("stored state %q, want %q", got.Labels[nnv1.StateLabel], tt.want)
			}
			if !tt.wantErr && cached.Labels[nnv1.StateLabel] != string(tt.to) {
				t.Errorf("caller's copy not refreshed: %q", cached.Labels[nnv1.StateLabel])
			}
		})
	}
}

// TestSetStateCommittedDespiteError checks that a state change the apiserver committed although
// the call reported an error (a timed-out write retried by client-go) counts as done, and that a
// failed write that did not commit stays an error.
func TestSetStateCommittedDespiteError(t *testing.T) {
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1",
				Labels: map[string]string{nnv1.PoolLabel: "pool", nnv1.StateLabel: "warm"}}}
			h := newHarness(t, pod)
			base := h.c
			r := &Reconciler{Client: interceptor.NewClient(base.(client.WithWatch), interceptor.Funcs{
				Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					if commit {
						if err := c.Patch(ctx, obj.DeepCopyObject().(client.Object), patch, opts...); err != nil {
							return err
						}
					}
					return apierrors.NewTimeoutError("etcd request timed out", 1)
				},
			}), APIReader: base}
			ctx := context.Background()
			var cached corev1.Pod
			if err := base.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "p"}, &cached); err != nil {
				t.Fatal(err)
			}
			err := r.setState(ctx, &cached, warmpool.Serving)
			if commit && (err != nil || cached.Labels[nnv1.StateLabel] != "serving") {
				t.Fatalf("committed change: err %v, label %q", err, cached.Labels[nnv1.StateLabel])
			}
			if !commit && err == nil {
				t.Fatal("uncommitted change reported as done")
			}
		})
	}
}
