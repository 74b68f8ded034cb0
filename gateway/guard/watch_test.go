package guard

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// Watch reports synced only once its handler applied every policy of the first list, which the
// gateway's readiness waits for: no request runs before its pool's policy is in place.
func TestWatchSyncedAfterPoliciesApplied(t *testing.T) {
	s := runtime.NewScheme()
	if err := nnv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	const n = 200
	list := &nnv1.GuardrailPolicyList{}
	for i := 0; i < n; i++ {
		list.Items = append(list.Items, nnv1.GuardrailPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("p%03d", i), ResourceVersion: "1"},
			Spec: nnv1.GuardrailPolicySpec{TargetRef: nnv1.PolicyTargetRef{Kind: "AgentPool", Name: fmt.Sprintf("pool%03d", i)},
				Request: []nnv1.GuardrailCheck{{Name: "pii", Type: nnv1.GuardrailPII, Action: "redact"}}}})
	}
	list.ResourceVersion = "1"
	inf := toolscache.NewSharedIndexInformer(listOnly{&toolscache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) { return list, nil },
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			return watch.NewFake(), nil
		},
	}}, &nnv1.GuardrailPolicy{}, 0, toolscache.Indexers{})
	gvk := schema.GroupVersionKind{Group: nnv1.GroupVersion.Group, Version: nnv1.GroupVersion.Version, Kind: "GuardrailPolicy"}
	c := &informertest.FakeInformers{Scheme: s, InformersByGVK: map[schema.GroupVersionKind]toolscache.SharedIndexInformer{gvk: inf}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pols := NewPolicies()
	synced, err := Watch(ctx, c, pols, CompileOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if synced() {
		t.Fatal("synced before the informer ran")
	}
	go inf.Run(ctx.Done())
	for deadline := time.Now().Add(10 * time.Second); !synced(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("never synced")
		}
	}
	for i := 0; i < n; i++ {
		if pols.For("ns", fmt.Sprintf("pool%03d", i), "") == nil {
			t.Fatalf("synced, but the policy of pool%03d is not applied", i)
		}
	}
}

// listOnly is a ListWatch that says it cannot stream the initial list (watch-list semantics), so
// the reflector lists.
type listOnly struct{ *toolscache.ListWatch }

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }
