package agentsession

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// TestReconcileWorkspaceOverLimit: the suspension's Checkpoint carries the workspace volume;
// when the node agent refuses it as over the sizeLimit, the session stays Running in the same
// pod with no checkpoint recorded, and its Ready condition and a Warning event name
// spec.workspaceSizeLimit.
func TestReconcileWorkspaceOverLimit(t *testing.T) {
	s := newSession(time.Minute)
	h := newHarness(t, testClass(nil), s)
	h.step(nnv1.SessionPending)
	h.ready("s1-1")
	h.step(nnv1.SessionRunning)
	h.now = h.now.Add(time.Minute)
	h.step(nnv1.SessionSuspending)
	var ck nnv1.AgentCheckpoint
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "a", Name: "s1-1-suspend"}, &ck); err != nil {
		t.Fatal(err)
	}
	if ck.Spec.WorkspaceVolume != WorkspaceVolume {
		t.Fatalf("checkpoint spec.workspaceVolume %q, want %q", ck.Spec.WorkspaceVolume, WorkspaceVolume)
	}
	ck.Status.Phase = nnv1.AgentCheckpointFailed
	ck.Status.Message = `WorkspaceTooLarge: container c: workspace /workspace (emptyDir volume "workspace" sizeLimit 1073741824 bytes): workspace over its size limit`
	if err := h.c.Status().Update(context.Background(), &ck); err != nil {
		t.Fatal(err)
	}
	got := h.step(nnv1.SessionRunning)
	if got.Status.PodName != "s1-1" || !h.podExists("s1-1") || got.Status.LastCheckpoint != "" {
		t.Fatalf("after the refused suspension: status %+v, pod exists %v; want Running in s1-1 with no checkpoint", got.Status, h.podExists("s1-1"))
	}
	c := meta.FindStatusCondition(got.Status.Conditions, ConditionReady)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != "CheckpointFailed" ||
		!strings.HasPrefix(c.Message, "Running: spec.workspaceSizeLimit: ") || !strings.Contains(c.Message, "keeps running") {
		t.Fatalf("condition %+v, want Ready=True naming spec.workspaceSizeLimit", c)
	}
}

// TestSuspendFailure: only the node agent's WorkspaceTooLarge names spec.workspaceSizeLimit.
func TestSuspendFailure(t *testing.T) {
	for msg, want := range map[string]string{
		"WorkspaceTooLarge: workspace over its size limit": "spec.workspaceSizeLimit: ",
		"CheckpointFailed: criu dump: boom":                "suspension failed, the session keeps running with its state (checkpoint x: CheckpointFailed: criu dump: boom)",
		"":                                                 "(checkpoint x: no message)",
	} {
		got := SuspendFailure(&nnv1.AgentCheckpoint{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Status: nnv1.AgentCheckpointStatus{Message: msg}})
		if !strings.Contains(got, want) || (strings.Contains(got, "spec.workspaceSizeLimit") != strings.HasPrefix(msg, "WorkspaceTooLarge")) {
			t.Errorf("%q: %q, want it to contain %q", msg, got, want)
		}
	}
}
