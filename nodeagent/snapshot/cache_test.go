package snapshot

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/checkpoint/container"
	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// cacheEntry writes a local cache entry of ns/agent/id (container.Engine's layout), used at used.
func cacheEntry(t *testing.T, root, ns, agent, id string, used time.Time) string {
	t.Helper()
	dir := filepath.Join(root, ns, agent, id)
	if err := os.MkdirAll(filepath.Join(dir, "images"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "images", "pages-1.img"), make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(dir, used, used); err != nil {
		t.Fatal(err)
	}
	return dir
}

func suspendCheckpoint(ns, name string) *v1alpha1.AgentCheckpoint {
	return &v1alpha1.AgentCheckpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:   v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.CheckpointOperation, Agent: "session.s", Source: &v1alpha1.ContainerRef{Pod: "s-1"}},
		Status: v1alpha1.AgentCheckpointStatus{Phase: v1alpha1.AgentCheckpointSucceeded}}
}

// TestCacheEvictedWithAgentCheckpoint: the node agent's cached dump goes when the AgentCheckpoint
// that wrote it is deleted (an AgentSession's go with the session), stays while it exists, and
// the same name in another namespace keeps its own.
func TestCacheEvictedWithAgentCheckpoint(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	ctx := context.Background()
	root := t.TempDir()
	ac := suspendCheckpoint("ns", "s-1-suspend")
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(ac).WithStatusSubresource(ac).Build()
	r := &Reconciler{Client: c, Recorder: record.NewFakeRecorder(5), Engine: &ContainerdEngine{C: &container.Engine{LocalCacheDir: root}}, NodeName: "node-a"}
	mine := cacheEntry(t, root, "ns", "session.s", CheckpointID(ac), time.Now())
	theirs := cacheEntry(t, root, "other", "session.s", v1alpha1.CheckpointIDFor("other", "s-1-suspend"), time.Now())
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "s-1-suspend"}}

	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Fatalf("the entry of an existing AgentCheckpoint went: %v", err)
	}
	if err := c.Delete(ctx, ac); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mine); !os.IsNotExist(err) {
		t.Errorf("the entry of the deleted AgentCheckpoint is still cached (%v)", err)
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Errorf("another namespace's entry of the same name went: %v", err)
	}
}

// TestCacheSweep: the periodic sweep evicts entries whose AgentCheckpoint is gone (a deletion the
// node agent missed) once they are older than the grace, and keeps those of existing ones.
func TestCacheSweep(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	now := time.Now()
	root := t.TempDir()
	live := suspendCheckpoint("ns", "live-1-suspend")
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(live).Build()
	r := &Reconciler{Client: c, Engine: &ContainerdEngine{C: &container.Engine{LocalCacheDir: root}}, NodeName: "node-a"}
	old := now.Add(-2 * DefaultCacheSweepGrace)
	kept := cacheEntry(t, root, "ns", "session.live", CheckpointID(live), old)
	orphan := cacheEntry(t, root, "ns", "session.gone", v1alpha1.CheckpointIDFor("ns", "gone-1-suspend"), old)
	young := cacheEntry(t, root, "ns", "session.new", v1alpha1.CheckpointIDFor("ns", "new-1-suspend"), now.Add(-time.Second))
	if err := r.sweepCache(context.Background(), now, DefaultCacheSweepGrace); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]bool{kept: true, orphan: false, young: true} {
		if _, err := os.Stat(dir); (err == nil) != want {
			t.Errorf("%s present=%v, want %v", dir, err == nil, want)
		}
	}
}

func TestOrphanedEntries(t *testing.T) {
	now := time.Unix(1000, 0)
	en := func(id string, ago time.Duration) container.CachedCheckpoint {
		return container.CachedCheckpoint{Key: store.Key{Namespace: "ns", Agent: "a"}, ID: id, Used: now.Add(-ago)}
	}
	tests := []struct {
		name  string
		entry container.CachedCheckpoint
		live  bool
		want  bool
	}{
		{"live", en("ns.a", time.Hour), true, false},
		{"gone, old", en("ns.b", time.Hour), false, true},
		{"gone, at the grace", en("ns.c", time.Minute), false, true},
		{"gone, within the grace", en("ns.d", time.Minute-time.Second), false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := orphanedEntries([]container.CachedCheckpoint{tc.entry}, map[string]bool{tc.entry.ID: tc.live}, now, time.Minute)
			if (len(got) == 1) != tc.want {
				t.Errorf("orphaned = %v, want %v", got, tc.want)
			}
		})
	}
}
