package agentsession

import (
	"strings"
	"testing"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

func TestNewCheckpointAndRestore(t *testing.T) {
	s := testSession(nil, "")
	ck := NewCheckpoint(s, "s1-2", 2)
	if ck.Name != "s1-2-suspend" || ck.Namespace != "a" || ck.Spec.Operation != nnv1.CheckpointOperation ||
		ck.Spec.Source.Pod != "s1-2" || ck.Spec.Agent != "session.s1" || ck.Spec.LeaveRunning {
		t.Fatalf("checkpoint %+v", ck)
	}
	if _, err := NewRestore(s, "s1-3", 3); err == nil || !strings.Contains(err.Error(), "status.lastCheckpoint") {
		t.Fatalf("restore without a checkpoint: %v", err)
	}
	s.Status.LastCheckpoint = nnv1.CheckpointIDFor("a", ck.Name)
	r, err := NewRestore(s, "s1-3", 3)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != "s1-3-resume" || r.Spec.Operation != nnv1.RestoreOperation || r.Spec.Target.Pod != "s1-3" || r.Spec.CheckpointID != "a.s1-2-suspend" {
		t.Fatalf("restore %+v", r)
	}
	// Tenant b's session whose status names tenant a's checkpoint restores nothing.
	b := testSession(nil, "")
	b.Namespace = "b"
	b.Status.LastCheckpoint = "a.s1-2-suspend"
	if _, err := NewRestore(b, "s1-1", 1); err == nil || !strings.Contains(err.Error(), "not a checkpoint of namespace \"b\"") {
		t.Fatalf("cross-namespace restore: %v", err)
	}
}

func TestOpOf(t *testing.T) {
	for ph, want := range map[nnv1.AgentCheckpointPhase]Op{
		"": OpRunning, nnv1.AgentCheckpointPending: OpRunning, nnv1.AgentCheckpointRunning: OpRunning,
		nnv1.AgentCheckpointSucceeded: OpSucceeded, nnv1.AgentCheckpointFailed: OpFailed,
	} {
		if got := OpOf(&nnv1.AgentCheckpoint{Status: nnv1.AgentCheckpointStatus{Phase: ph}}); got != want {
			t.Errorf("%q: %d, want %d", ph, got, want)
		}
	}
	if OpOf(nil) != OpNone {
		t.Error("nil is not OpNone")
	}
}
