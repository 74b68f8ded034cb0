package agentsession

import (
	"testing"
	"time"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	running := Observed{Phase: nnv1.SessionRunning, PodExists: true, PodReady: true, LastActivity: t0, IdleTimeout: 10 * time.Minute}
	with := func(o Observed, f func(*Observed)) Observed { f(&o); return o }
	for _, tc := range []struct {
		name    string
		o       Observed
		now     time.Time
		action  Action
		phase   nnv1.AgentSessionPhase
		byReq   bool
		requeue time.Duration
		drain   bool
		reason  string
	}{
		{"new session creates its pod", Observed{}, t0, CreatePod, nnv1.SessionPending, false, 0, false, ""},
		{"pending waits for readiness", Observed{Phase: nnv1.SessionPending, PodExists: true}, t0, Wait, nnv1.SessionPending, false, 0, false, ""},
		{"ready pod runs", Observed{Phase: nnv1.SessionPending, PodExists: true, PodReady: true}, t0, MarkRunning, nnv1.SessionRunning, false, 0, false, ""},
		{"running before idle deadline requeues at it", running, t0.Add(4 * time.Minute), Wait, nnv1.SessionRunning, false, 6 * time.Minute, false, ""},
		{"idle timeout suspends", running, t0.Add(10 * time.Minute), StartCheckpoint, nnv1.SessionSuspending, false, 0, false, ""},
		{"no idle timeout never idles", with(running, func(o *Observed) { o.IdleTimeout = 0 }), t0.Add(1000 * time.Hour), Wait, nnv1.SessionRunning, false, 0, false, ""},
		{"spec.suspend suspends at once", with(running, func(o *Observed) { o.Suspend = true }), t0, StartCheckpoint, nnv1.SessionSuspending, true, 0, false, ""},
		{"lost pod without checkpoint starts afresh", with(running, func(o *Observed) { o.PodExists = false }), t0, CreatePod, nnv1.SessionPending, false, 0, false, ""},
		{"lost pod with checkpoint resumes", with(running, func(o *Observed) { o.PodExists = false; o.HasCheckpoint = true }), t0, CreatePod, nnv1.SessionResuming, false, 0, false, ""},
		{"checkpoint under way waits", Observed{Phase: nnv1.SessionSuspending, PodExists: true, Checkpoint: OpRunning}, t0, Wait, nnv1.SessionSuspending, false, 0, false, ""},
		{"checkpoint done suspends", Observed{Phase: nnv1.SessionSuspending, PodExists: true, Checkpoint: OpSucceeded}, t0, FinishSuspend, nnv1.SessionSuspended, false, 0, false, ""},
		{"checkpoint failed keeps running", Observed{Phase: nnv1.SessionSuspending, PodExists: true, Checkpoint: OpFailed}, t0, AbortSuspend, nnv1.SessionRunning, false, 0, false, ""},
		{"idle-suspended stays without activity", Observed{Phase: nnv1.SessionSuspended, PhaseSince: t0, LastActivity: t0.Add(-time.Minute)}, t0.Add(time.Hour), Wait, nnv1.SessionSuspended, false, 0, false, ""},
		{"activity after suspension resumes", Observed{Phase: nnv1.SessionSuspended, PhaseSince: t0, LastActivity: t0.Add(time.Second)}, t0.Add(time.Hour), CreatePod, nnv1.SessionResuming, false, 0, false, ""},
		{"spec.suspend holds a session despite activity", Observed{Phase: nnv1.SessionSuspended, Suspend: true, PhaseSince: t0, LastActivity: t0.Add(time.Second)}, t0, Wait, nnv1.SessionSuspended, false, 0, false, ""},
		{"spec.suspend false resumes a requested suspension", Observed{Phase: nnv1.SessionSuspended, SuspendedByRequest: true, PhaseSince: t0}, t0, CreatePod, nnv1.SessionResuming, false, 0, false, ""},
		{"resume restores once the host pod runs (not yet Ready)", Observed{Phase: nnv1.SessionResuming, PodExists: true, PodRunning: true}, t0, StartRestore, nnv1.SessionResuming, false, 0, false, ""},
		{"a missing restore is created before the pod runs (prefetch while it starts)", Observed{Phase: nnv1.SessionResuming, PodExists: true}, t0, StartRestore, nnv1.SessionResuming, false, 0, false, ""},
		{"resume waits for the restore", Observed{Phase: nnv1.SessionResuming, PodExists: true, Restore: OpRunning}, t0, Wait, nnv1.SessionResuming, false, 0, false, ""},
		{"restore done waits for readiness", Observed{Phase: nnv1.SessionResuming, PodExists: true, PodRunning: true, Restore: OpSucceeded}, t0, Wait, nnv1.SessionResuming, false, 0, false, ""},
		{"restore done and ready runs", Observed{Phase: nnv1.SessionResuming, PodExists: true, PodRunning: true, PodReady: true, Restore: OpSucceeded}, t0, MarkRunning, nnv1.SessionRunning, false, 0, false, ""},
		{"restore failed stays suspended", Observed{Phase: nnv1.SessionResuming, PodExists: true, Restore: OpFailed}, t0, AbortResume, nnv1.SessionSuspended, false, 0, false, ""},
		{"draining node suspends before the idle deadline", with(running, func(o *Observed) { o.NodeDraining = true }), t0, StartCheckpoint, nnv1.SessionSuspending, false, 0, true, "NodeDraining"},
		{"draining node suspends a session without idle timeout", with(running, func(o *Observed) { o.NodeDraining = true; o.IdleTimeout = 0 }), t0, StartCheckpoint, nnv1.SessionSuspending, false, 0, true, "NodeDraining"},
		{"spec.suspend wins over a drain", with(running, func(o *Observed) { o.NodeDraining = true; o.Suspend = true }), t0, StartCheckpoint, nnv1.SessionSuspending, true, 0, false, "SuspendRequested"},
		{"draining node with the pod lost resumes from the checkpoint", with(running, func(o *Observed) { o.NodeDraining = true; o.PodExists = false; o.HasCheckpoint = true }), t0, CreatePod, nnv1.SessionResuming, false, 0, false, "PodLost"},
		{"drain-suspended resumes at once without activity", Observed{Phase: nnv1.SessionSuspended, PhaseSince: t0, LastActivity: t0.Add(-time.Hour), DrainedNode: "n1"}, t0, CreatePod, nnv1.SessionResuming, false, 0, false, "ResumingElsewhere"},
		{"drain-suspended stays while spec.suspend", Observed{Phase: nnv1.SessionSuspended, Suspend: true, PhaseSince: t0, DrainedNode: "n1"}, t0, Wait, nnv1.SessionSuspended, false, 0, false, ""},
		{"a drain's checkpoint done suspends", Observed{Phase: nnv1.SessionSuspending, PodExists: true, Checkpoint: OpSucceeded, DrainedNode: "n1"}, t0, FinishSuspend, nnv1.SessionSuspended, false, 0, false, "Checkpointed"},
		{"evicted from a draining node checkpoints in its grace period", with(running, func(o *Observed) { o.PodExists = false; o.PodTerminating = true; o.NodeDraining = true }), t0, StartCheckpoint, nnv1.SessionSuspending, false, 0, true, "NodeDraining"},
		{"evicted from a draining node while spec.suspend stays suspended", with(running, func(o *Observed) {
			o.PodExists = false
			o.PodTerminating = true
			o.NodeDraining = true
			o.Suspend = true
		}), t0, StartCheckpoint, nnv1.SessionSuspending, true, 0, false, "SuspendRequested"},
		{"a pod deleted on a healthy node is lost", with(running, func(o *Observed) { o.PodExists = false; o.PodTerminating = true; o.HasCheckpoint = true }), t0, CreatePod, nnv1.SessionResuming, false, 0, false, "PodLost"},
		{"a drain's missing checkpoint of a terminating pod starts again", Observed{Phase: nnv1.SessionSuspending, PodTerminating: true, DrainedNode: "n1"}, t0, StartCheckpoint, nnv1.SessionSuspending, false, 0, false, "CheckpointMissing"},
		{"a drain's checkpoint under way in the grace period waits", Observed{Phase: nnv1.SessionSuspending, PodTerminating: true, Checkpoint: OpRunning, DrainedNode: "n1"}, t0, Wait, nnv1.SessionSuspending, false, 0, false, ""},
		{"a drain's checkpoint failed keeps running", Observed{Phase: nnv1.SessionSuspending, PodExists: true, Checkpoint: OpFailed, DrainedNode: "n1"}, t0, AbortSuspend, nnv1.SessionRunning, false, 0, false, "CheckpointFailed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.o, tc.now)
			if d.Action != tc.action || d.Phase != tc.phase || d.ByRequest != tc.byReq || d.RequeueAfter != tc.requeue || d.Drain != tc.drain {
				t.Fatalf("Decide = %+v, want action %d phase %s byRequest %v requeue %v drain %v", d, tc.action, tc.phase, tc.byReq, tc.requeue, tc.drain)
			}
			if tc.reason != "" && d.Reason != tc.reason {
				t.Fatalf("reason %q, want %q", d.Reason, tc.reason)
			}
		})
	}
}
