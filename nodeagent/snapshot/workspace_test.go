package snapshot

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/checkpoint/store"
	"github.com/neuronetes/neuronetes/checkpoint/workspace"
)

// wsEngine records the Workspace of each Checkpoint.
type wsEngine struct {
	fakeEngine
	got []*Workspace
}

func (w *wsEngine) Checkpoint(ctx context.Context, c Container, k store.Key, id string, lr bool, p store.ProgressFunc) (*store.Manifest, error) {
	w.got = append(w.got, c.Workspace)
	return w.fakeEngine.Checkpoint(ctx, c, k, id, lr, p)
}

func wsPod(limit string, mount bool) *corev1.Pod {
	p := pod("p", "node-a", true)
	ed := &corev1.EmptyDirVolumeSource{}
	if limit != "" {
		q := resource.MustParse(limit)
		ed.SizeLimit = &q
	}
	p.Spec.Volumes = []corev1.Volume{{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: ed}},
		{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}}}
	if mount {
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "workspace", MountPath: "/workspace"}}
	}
	return p
}

// TestReconcileWorkspace: spec.workspaceVolume reaches the engine as the volume's mount path and
// sizeLimit; a volume that is missing, not an emptyDir, without sizeLimit or not mounted fails
// InvalidSpec naming the field without calling the engine; a workspace over its limit fails
// with reason WorkspaceTooLarge.
func TestReconcileWorkspace(t *testing.T) {
	for _, tc := range []struct {
		name, volume string
		pod          *corev1.Pod
		engineErr    error
		want         *Workspace
		wantPhase    v1alpha1.AgentCheckpointPhase
		wantMsg      string
	}{
		{"carried", "workspace", wsPod("2Mi", true), nil, &Workspace{Volume: "workspace", Path: "/workspace", Limit: 2 << 20}, v1alpha1.AgentCheckpointSucceeded, ""},
		{"no field, no workspace", "", wsPod("2Mi", true), nil, nil, v1alpha1.AgentCheckpointSucceeded, ""},
		{"missing volume", "scratch", wsPod("2Mi", true), nil, nil, v1alpha1.AgentCheckpointFailed, `InvalidSpec: spec.workspaceVolume: pod p has no volume "scratch"`},
		{"not an emptyDir", "cfg", wsPod("2Mi", true), nil, nil, v1alpha1.AgentCheckpointFailed, `spec.workspaceVolume: volume "cfg" of pod p is not an emptyDir`},
		{"no sizeLimit", "workspace", wsPod("", true), nil, nil, v1alpha1.AgentCheckpointFailed, "spec.workspaceVolume: emptyDir volume \"workspace\" of pod p has no sizeLimit"},
		{"not mounted", "workspace", wsPod("2Mi", false), nil, nil, v1alpha1.AgentCheckpointFailed, "spec.workspaceVolume: container agent of pod p does not mount volume \"workspace\""},
		{"over the limit", "workspace", wsPod("1Ki", true), fmt.Errorf("workspace /workspace: %w", workspace.ErrTooLarge),
			&Workspace{Volume: "workspace", Path: "/workspace", Limit: 1024}, v1alpha1.AgentCheckpointFailed, "WorkspaceTooLarge: workspace /workspace: workspace over its size limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := runtime.NewScheme()
			_ = clientgoscheme.AddToScheme(s)
			_ = v1alpha1.AddToScheme(s)
			ac := &v1alpha1.AgentCheckpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "req", UID: "u1"},
				Spec: v1alpha1.AgentCheckpointSpec{Operation: v1alpha1.CheckpointOperation, Source: &v1alpha1.ContainerRef{Pod: "p"}, WorkspaceVolume: tc.volume}}
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(ac, tc.pod).WithStatusSubresource(ac).Build()
			eng := &wsEngine{fakeEngine: fakeEngine{err: tc.engineErr}}
			r := &Reconciler{Client: c, Recorder: record.NewFakeRecorder(20), Engine: eng, NodeName: "node-a"}
			if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "req"}}); err != nil {
				t.Fatal(err)
			}
			var got v1alpha1.AgentCheckpoint
			if err := c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "req"}, &got); err != nil {
				t.Fatal(err)
			}
			if got.Status.Phase != tc.wantPhase || !strings.Contains(got.Status.Message, tc.wantMsg) {
				t.Fatalf("status %s %q, want %s containing %q", got.Status.Phase, got.Status.Message, tc.wantPhase, tc.wantMsg)
			}
			called := tc.want != nil || tc.wantPhase == v1alpha1.AgentCheckpointSucceeded
			if len(eng.got) != map[bool]int{true: 1, false: 0}[called] {
				t.Fatalf("engine called %d times, want called=%v", len(eng.got), called)
			}
			if called && fmt.Sprint(eng.got[0]) != fmt.Sprint(tc.want) {
				t.Fatalf("engine workspace %+v, want %+v", eng.got[0], tc.want)
			}
		})
	}
}
