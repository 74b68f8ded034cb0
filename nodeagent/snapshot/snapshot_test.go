package snapshot

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/checkpoint/store"
)

type call struct {
	op, container, agent, id string
}

type fakeEngine struct {
	calls   []call
	err     error
	latest  *store.Manifest
	pruned  *store.Retention
	reports []store.Progress
}

func (f *fakeEngine) Checkpoint(_ context.Context, c Container, k store.Key, id string, _ bool, p store.ProgressFunc) (*store.Manifest, error) {
	f.calls = append(f.calls, call{"checkpoint", c.ID, k.String(), id})
	if f.err != nil {
		return nil, f.err
	}
	for _, d := range []int64{0, 50, 100} {
		p(store.Progress{Phase: "upload", Done: d, Total: 100})
	}
	return &store.Manifest{Key: k, ID: id, TotalBytes: 100, NewBytes: 7}, nil
}

func (f *fakeEngine) Restore(_ context.Context, c Container, k store.Key, id string, _ store.ProgressFunc) error {
	f.calls = append(f.calls, call{"restore", c.ID, k.String(), id})
	return f.err
}

func (f *fakeEngine) Latest(_ context.Context, _ store.Key) (*store.Manifest, error) {
	if f.latest == nil {
		return nil, store.ErrNotFound
	}
	return f.latest, nil
}

func (f *fakeEngine) Prune(_ context.Context, _ store.Key, r store.Retention) (store.PruneResult, error) {
	f.pruned = &r
	return store.PruneResult{Deleted: []string{"old"}}, nil
}

func pod(name, node string, running bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{v1alpha1.AgentClassLabel: "chat"}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "agent"}}},
	}
	st := corev1.ContainerStatus{Name: "agent"}
	if running {
		st.ContainerID = "containerd://abc123"
		st.State.Running = &corev1.ContainerStateRunning{}
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{st}
	return p
}

func TestReconcile(t *testing.T) {
	ref := &v1alpha1.ContainerRef{Pod: "p"}
	tests := []struct {
		name       string
		spec       v1alpha1.AgentCheckpointSpec
		pod        *corev1.Pod
		engineErr  error
		latest     *store.Manifest
		wantPhase  v1alpha1.AgentCheckpointPhase
		wantCalls  []call
		wantEvents []string
		wantMsg    string
		requeue    bool
	}{
		{
			name:       "checkpoint on this node",
			spec:       v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.CheckpointOperation, Source: ref, Retention: &v1alpha1.CheckpointRetention{KeepLast: 3}},
			pod:        pod("p", "node-a", true),
			wantPhase:  v1alpha1.AgentCheckpointSucceeded,
			wantCalls:  []call{{"checkpoint", "abc123", "ns/chat", "ns.req"}},
			wantEvents: []string{"Normal Started", "Normal Checkpointed", "Normal Pruned"},
		},
		{
			name: "pod on another node is left alone",
			spec: v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.CheckpointOperation, Source: ref},
			pod:  pod("p", "node-b", true),
		},
		{
			name:      "container not running yet",
			spec:      v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.CheckpointOperation, Source: ref},
			pod:       pod("p", "node-a", false),
			wantPhase: v1alpha1.AgentCheckpointPending,
			wantMsg:   "waiting for container agent",
			requeue:   true,
		},
		{
			name:       "engine failure is reported",
			spec:       v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.CheckpointOperation, Source: ref, Agent: "explicit"},
			pod:        pod("p", "node-a", true),
			engineErr:  errors.New("criu dump: boom"),
			wantPhase:  v1alpha1.AgentCheckpointFailed,
			wantCalls:  []call{{"checkpoint", "abc123", "ns/explicit", "ns.req"}},
			wantEvents: []string{"Normal Started", "Warning CheckpointFailed"},
			wantMsg:    "CheckpointFailed: criu dump: boom",
		},
		{
			name:       "restore latest",
			spec:       v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.RestoreOperation, Target: ref, Agent: "chat"},
			pod:        pod("p", "node-a", true),
			latest:     &store.Manifest{ID: "ns.ck7"},
			wantPhase:  v1alpha1.AgentCheckpointSucceeded,
			wantCalls:  []call{{"restore", "abc123", "ns/chat", "ns.ck7"}},
			wantEvents: []string{"Normal Started", "Normal Restored"},
		},
		{
			name:       "restore of own checkpoint id",
			spec:       v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.RestoreOperation, Target: ref, Agent: "chat", CheckpointID: "ns.ck3"},
			pod:        pod("p", "node-a", true),
			wantPhase:  v1alpha1.AgentCheckpointSucceeded,
			wantCalls:  []call{{"restore", "abc123", "ns/chat", "ns.ck3"}},
			wantEvents: []string{"Normal Started", "Normal Restored"},
		},
		{
			name:       "restore of another namespace's checkpoint is refused",
			spec:       v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.RestoreOperation, Target: ref, Agent: "chat", CheckpointID: "victim.ck3"},
			pod:        pod("p", "node-a", true),
			wantPhase:  v1alpha1.AgentCheckpointFailed,
			wantEvents: []string{"Warning RestoreSourceRefused"},
			wantMsg:    `spec.checkpointID: checkpoint id "victim.ck3" is not a checkpoint of namespace "ns"`,
		},
		{
			name:       "restore without any checkpoint",
			spec:       v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.RestoreOperation, Target: ref, Agent: "chat"},
			pod:        pod("p", "node-a", true),
			wantPhase:  v1alpha1.AgentCheckpointFailed,
			wantEvents: []string{"Normal Started", "Warning NoCheckpoint"},
			wantMsg:    "NoCheckpoint",
		},
		{
			name:       "checkpoint without source",
			spec:       v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.CheckpointOperation},
			pod:        pod("p", "node-a", true),
			wantPhase:  v1alpha1.AgentCheckpointFailed,
			wantEvents: []string{"Warning InvalidSpec"},
			wantMsg:    "spec.source.pod is required",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := runtime.NewScheme()
			_ = clientgoscheme.AddToScheme(s)
			_ = v1alpha1.AddToScheme(s)
			ac := &v1alpha1.AgentCheckpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "req", UID: "u1"}, Spec: tc.spec}
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(ac, tc.pod).WithStatusSubresource(ac).Build()
			eng := &fakeEngine{err: tc.engineErr, latest: tc.latest}
			rec := record.NewFakeRecorder(20)
			r := &Reconciler{Client: c, Recorder: rec, Engine: eng, NodeName: "node-a"}
			res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "req"}})
			if err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			if (res.RequeueAfter > 0) != tc.requeue {
				t.Errorf("requeue %v, want %v", res.RequeueAfter, tc.requeue)
			}
			var got v1alpha1.AgentCheckpoint
			if err := c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "req"}, &got); err != nil {
				t.Fatal(err)
			}
			if got.Status.Phase != tc.wantPhase {
				t.Errorf("phase %q, want %q (message %q)", got.Status.Phase, tc.wantPhase, got.Status.Message)
			}
			if !strings.Contains(got.Status.Message, tc.wantMsg) {
				t.Errorf("message %q lacks %q", got.Status.Message, tc.wantMsg)
			}
			if len(eng.calls) != len(tc.wantCalls) {
				t.Fatalf("engine calls %v, want %v", eng.calls, tc.wantCalls)
			}
			for i := range tc.wantCalls {
				if eng.calls[i] != tc.wantCalls[i] {
					t.Errorf("call %d = %v, want %v", i, eng.calls[i], tc.wantCalls[i])
				}
			}
			var events []string
			for len(rec.Events) > 0 {
				e := <-rec.Events
				f := strings.Fields(e)
				events = append(events, f[0]+" "+f[1])
			}
			if strings.Join(events, ",") != strings.Join(tc.wantEvents, ",") {
				t.Errorf("events %v, want %v", events, tc.wantEvents)
			}
			if tc.wantPhase == v1alpha1.AgentCheckpointSucceeded {
				if got.Status.Progress != 100 || got.Status.CompletionTime == nil || got.Status.NodeName != "node-a" {
					t.Errorf("status %+v lacks progress/completion/node", got.Status)
				}
				if tc.spec.Operation == v1alpha1.CheckpointOperation && (got.Status.TotalBytes != 100 || got.Status.NewBytes != 7) {
					t.Errorf("bytes %d/%d, want 100/7", got.Status.TotalBytes, got.Status.NewBytes)
				}
				if tc.spec.Retention != nil && (eng.pruned == nil || eng.pruned.KeepLast != 3) {
					t.Errorf("retention not applied: %+v", eng.pruned)
				}
				// A finished request is not run again.
				if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "req"}}); err != nil || len(eng.calls) != len(tc.wantCalls) {
					t.Errorf("second reconcile ran again: calls %v err %v", eng.calls, err)
				}
			}
		})
	}
}

func TestInterruptedRunFails(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	ac := &v1alpha1.AgentCheckpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "req"},
		Spec:   v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.CheckpointOperation, Source: &v1alpha1.ContainerRef{Pod: "p"}},
		Status: v1alpha1.AgentCheckpointStatus{Phase: v1alpha1.AgentCheckpointRunning, StartTime: &metav1.Time{Time: time.Now()}}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(ac, pod("p", "node-a", true)).WithStatusSubresource(ac).Build()
	r := &Reconciler{Client: c, Recorder: record.NewFakeRecorder(5), Engine: &fakeEngine{}, NodeName: "node-a"}
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "req"}}); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.AgentCheckpoint
	_ = c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "req"}, &got)
	if got.Status.Phase != v1alpha1.AgentCheckpointFailed || !strings.Contains(got.Status.Message, "Interrupted") {
		t.Errorf("status %+v, want Failed/Interrupted", got.Status)
	}
}
