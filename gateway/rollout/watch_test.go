package rollout

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

// listOnly is a ListWatch that cannot stream the initial list, so the reflector lists.
type listOnly struct{ *toolscache.ListWatch }

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }

// Watch reports synced only once its handler applied every rollout of the first list (the
// gateway's readiness waits for it), not merely once the informer's store is filled.
func TestWatchSyncedAfterRolloutsApplied(t *testing.T) {
	s := runtime.NewScheme()
	if err := nnv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	const n = 200
	list := &nnv1.AgentRolloutList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	for i := 0; i < n; i++ {
		list.Items = append(list.Items, nnv1.AgentRollout{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("r%03d", i), ResourceVersion: "1"},
			Spec: nnv1.AgentRolloutSpec{StablePool: nnv1.LocalObjectReference{Name: fmt.Sprintf("s%03d", i)},
				CanaryPool: nnv1.LocalObjectReference{Name: fmt.Sprintf("c%03d", i)}}})
	}
	inf := toolscache.NewSharedIndexInformer(listOnly{&toolscache.ListWatch{
		ListWithContextFunc:  func(context.Context, metav1.ListOptions) (runtime.Object, error) { return list, nil },
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
	}}, &nnv1.AgentRollout{}, 0, toolscache.Indexers{})
	gvk := schema.GroupVersionKind{Group: nnv1.GroupVersion.Group, Version: nnv1.GroupVersion.Version, Kind: "AgentRollout"}
	c := &informertest.FakeInformers{Scheme: s, InformersByGVK: map[schema.GroupVersionKind]toolscache.SharedIndexInformer{gvk: inf}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	table := NewTable(nil)
	synced, err := Watch(ctx, c, table, nil)
	if err != nil {
		t.Fatal(err)
	}
	go inf.Run(ctx.Done())
	for deadline := time.Now().Add(10 * time.Second); !synced(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("never synced")
		}
	}
	for i := 0; i < n; i++ {
		if table.Get("ns", fmt.Sprintf("r%03d", i)) == nil {
			t.Fatalf("synced, but rollout r%03d is not in the table", i)
		}
	}
}
