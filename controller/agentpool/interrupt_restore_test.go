package agentpool

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

func TestLatestCheckpointOf(t *testing.T) {
	at := func(m int) *metav1.Time {
		v := metav1.NewTime(time.Date(2026, 1, 1, 0, m, 0, 0, time.UTC))
		return &v
	}
	ck := func(name, pod string, op nnv1.AgentCheckpointOperation, ph nnv1.AgentCheckpointPhase, done *metav1.Time) nnv1.AgentCheckpoint {
		c := nnv1.AgentCheckpoint{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec:   nnv1.AgentCheckpointSpec{Operation: op, Source: &nnv1.ContainerRef{Pod: pod}},
			Status: nnv1.AgentCheckpointStatus{Phase: ph, CheckpointID: "ns." + name, CompletionTime: done}}
		if op == nnv1.RestoreOperation {
			c.Spec.Source = nil
		}
		return c
	}
	ok, cp := nnv1.AgentCheckpointSucceeded, nnv1.CheckpointOperation
	for _, tc := range []struct {
		name string
		cks  []nnv1.AgentCheckpoint
		want string
	}{
		{"none", nil, ""},
		{"another pod's", []nnv1.AgentCheckpoint{ck("a", "other", cp, ok, at(1))}, ""},
		{"not finished", []nnv1.AgentCheckpoint{ck("a", "victim", cp, nnv1.AgentCheckpointRunning, nil)}, ""},
		{"failed", []nnv1.AgentCheckpoint{ck("a", "victim", cp, nnv1.AgentCheckpointFailed, at(1))}, ""},
		{"a restore", []nnv1.AgentCheckpoint{ck("a", "victim", nnv1.RestoreOperation, ok, at(1))}, ""},
		{"the latest of its own", []nnv1.AgentCheckpoint{ck("a", "victim", cp, ok, at(1)), ck("b", "victim", cp, ok, at(3)),
			ck("c", "victim", cp, ok, at(2)), ck("d", "other", cp, ok, at(9))}, "b"},
	} {
		got := ""
		if c := latestCheckpointOf(tc.cks, "victim"); c != nil {
			got = c.Name
		}
		if got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// restoreHarness is interruptHarness with checkpoints served, a restore host image, and
// (withCheckpoint) a Succeeded checkpoint of the interrupted pod.
func restoreHarness(t *testing.T, withCheckpoint bool) (*harness, string) {
	h, victim := interruptHarness(t, 0)
	h.r.Checkpoints, h.r.RestoreHostImage = true, "registry.k8s.io/pause:3.10"
	if withCheckpoint {
		done := metav1.NewTime(h.now)
		ck := &nnv1.AgentCheckpoint{ObjectMeta: metav1.ObjectMeta{Name: "ck-1", Namespace: "ns"},
			Spec:   nnv1.AgentCheckpointSpec{Operation: nnv1.CheckpointOperation, Source: &nnv1.ContainerRef{Pod: victim}},
			Status: nnv1.AgentCheckpointStatus{Phase: nnv1.AgentCheckpointSucceeded, CheckpointID: "ns.ck-1", CompletionTime: &done}}
		if err := h.c.Create(context.Background(), ck); err != nil {
			t.Fatal(err)
		}
	}
	return h, victim
}

// replacement returns the pool's unscheduled serving pod (the interrupted pod's replacement).
func (h *harness) replacement() *corev1.Pod {
	h.t.Helper()
	_, onDemand := h.capacity()
	for i := range onDemand {
		if onDemand[i].Spec.NodeName == "" {
			return &onDemand[i]
		}
	}
	h.t.Fatalf("no on-demand replacement pod: %v", onDemand)
	return nil
}

// TestInterruptionRestoresFromCheckpoint: the replacement of an interrupted pod with a checkpoint
// of its own is a resume pod restored from that checkpoint; the interrupted pod serves until the
// restored replacement is Ready. A failed restore deletes the resume pod and the next replacement
// starts cold.
func TestInterruptionRestoresFromCheckpoint(t *testing.T) {
	h, victim := restoreHarness(t, true)
	h.reconcile()
	repl := h.replacement()
	c := repl.Spec.Containers[0]
	if repl.Annotations[nnv1.RestoreFromAnnotation] != "demo/ns.ck-1" || repl.Annotations[RestoresInterruptedAnnotation] != victim ||
		c.Image != h.r.RestoreHostImage || len(c.Args) != 0 || len(c.Command) != 0 {
		t.Fatalf("replacement is not a resume pod of ck-1: annotations %v, container %+v", repl.Annotations, c)
	}
	// Running, not yet Ready (the restored agent does not serve yet): the restore is requested.
	repl.Spec.NodeName = "od-1"
	if err := h.c.Update(context.Background(), repl); err != nil {
		t.Fatal(err)
	}
	repl.Status.Phase = corev1.PodRunning
	if err := h.c.Status().Update(context.Background(), repl); err != nil {
		t.Fatal(err)
	}
	h.reconcile()
	var rs nnv1.AgentCheckpoint
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: restoreName(repl.Name)}, &rs); err != nil {
		t.Fatalf("no Restore AgentCheckpoint for the resume pod: %v", err)
	}
	if rs.Spec.Operation != nnv1.RestoreOperation || rs.Spec.Agent != "demo" || rs.Spec.CheckpointID != "ns.ck-1" || rs.Spec.Target == nil || rs.Spec.Target.Pod != repl.Name {
		t.Fatalf("restore %+v, want agent demo, checkpoint ns.ck-1 into %s", rs.Spec, repl.Name)
	}
	if _, live := h.pod(victim); !live {
		t.Fatal("the interrupted pod left before its restored replacement was Ready")
	}
	// The restore fails: the resume pod goes, the interrupted pod is marked, a cold pod replaces it.
	rs.Status.Phase, rs.Status.Message = nnv1.AgentCheckpointFailed, "criu restore: boom"
	if err := h.c.Update(context.Background(), &rs); err != nil {
		t.Fatal(err)
	}
	h.reconcile()
	if _, live := h.pod(repl.Name); live {
		t.Fatalf("resume pod %s kept after its restore failed", repl.Name)
	}
	if v, _ := h.pod(victim); v == nil || v.Annotations[RestoreFailedAnnotation] == "" {
		t.Fatalf("interrupted pod not marked after the failed restore: %+v", v)
	}
	h.reconcile()
	cold := h.replacement()
	if cold.Annotations[nnv1.RestoreFromAnnotation] != "" || cold.Spec.Containers[0].Image != "neuronetes.local/demo-agent:dev" {
		t.Fatalf("the replacement after a failed restore is not a cold pod: %v %s", cold.Annotations, cold.Spec.Containers[0].Image)
	}
}

// TestInterruptionRestoreNeedsCheckpointAndHostImage: without a checkpoint of the interrupted pod,
// or without a restore host image, the replacement starts cold.
func TestInterruptionRestoreNeedsCheckpointAndHostImage(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ck        bool
		hostImage string
	}{{"no checkpoint", false, "pause"}, {"no host image", true, ""}} {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := restoreHarness(t, tc.ck)
			h.r.RestoreHostImage = tc.hostImage
			h.reconcile()
			repl := h.replacement()
			if repl.Annotations[nnv1.RestoreFromAnnotation] != "" || repl.Spec.Containers[0].Image != "neuronetes.local/demo-agent:dev" {
				t.Fatalf("replacement is not cold: %v %s", repl.Annotations, repl.Spec.Containers[0].Image)
			}
		})
	}
}

func TestRestoreFailed(t *testing.T) {
	for _, tc := range []struct {
		phase nnv1.AgentCheckpointPhase
		left  bool
		want  bool
	}{
		{"", false, false}, {nnv1.AgentCheckpointRunning, false, false}, {nnv1.AgentCheckpointSucceeded, false, false},
		{nnv1.AgentCheckpointFailed, false, true}, {nnv1.AgentCheckpointFailed, true, true},
		{"", true, true}, {nnv1.AgentCheckpointRunning, true, true}, {nnv1.AgentCheckpointSucceeded, true, false},
	} {
		if got := restoreFailed(tc.phase, tc.left); got != tc.want {
			t.Errorf("restoreFailed(%q, interrupted pod left %v) = %v, want %v", tc.phase, tc.left, got, tc.want)
		}
	}
}

// TestInterruptionRestoreTimesOut: the resume pod never runs (its restore never starts); at the
// timeout the interrupted pod is drained, and the resume pod is replaced by a cold pod.
func TestInterruptionRestoreTimesOut(t *testing.T) {
	h, victim := restoreHarness(t, true)
	h.reconcile()
	repl := h.replacement()
	if repl.Annotations[RestoresInterruptedAnnotation] != victim {
		t.Fatalf("replacement %s is not a resume pod", repl.Name)
	}
	h.now = h.now.Add(31 * time.Second)
	h.reconcile()
	if _, live := h.pod(victim); live {
		t.Fatalf("interrupted pod %s not drained at the timeout", victim)
	}
	h.reconcile()
	if _, live := h.pod(repl.Name); live {
		t.Fatalf("resume pod %s kept although its interrupted pod left before the restore", repl.Name)
	}
	got := h.pods()["serving"]
	if len(got) != 2 {
		t.Fatalf("serving %v, want 2 (a cold pod instead of the resume pod)", got)
	}
	for _, name := range got {
		if p, _ := h.pod(name); p.Annotations[nnv1.RestoreFromAnnotation] != "" {
			t.Errorf("pod %s still restores after the timeout: %v", name, p.Annotations)
		}
	}
}
