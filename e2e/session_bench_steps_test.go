package e2e

import (
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/checkpoint/container"
)

// TestRestoreStepPhases: the timed engine's stamps of the container engine's restore steps split
// "restore call -> CRIU restore done" into phases that add up to it (lazy restore), and an eager
// restore (no lazy-pages daemon step) leaves the daemon's and the container's phases unseen
// while the others are measured.
func TestRestoreStepPhases(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	run := func(steps []container.RestoreStep) map[string]phase {
		s := newStamps()
		s.addAt(t0.Add(10*time.Millisecond), "node agent: restore into h starts (host container runs)")
		at := 10 * time.Millisecond
		for i, st := range steps {
			at += time.Duration(i+1) * 10 * time.Millisecond
			s.addAt(t0.Add(at), restoreStepStamp(st, "h"))
		}
		s.addAt(t0.Add(at+5*time.Millisecond), "node agent: CRIU restore into h done (err <nil>)")
		out := map[string]phase{}
		for _, p := range s.measure(resumePhases("s", "h"), t0, t0.Add(time.Second)) {
			out[p.name] = p
		}
		return out
	}
	lazy := run([]container.RestoreStep{container.StepStaged, container.StepPrepared, container.StepLazyDaemon,
		container.StepContainer, container.StepCRIURestore, container.StepResumed})
	whole := lazy["restore call -> CRIU restore done (incl. fetch wait)"]
	var sum time.Duration
	for i, p := range restoreStepPhases("h") {
		got := lazy[p.name]
		if !got.ok {
			t.Fatalf("lazy restore: phase %q not seen", p.name)
		}
		want := time.Duration(i+1) * 10 * time.Millisecond
		if i == 6 {
			want = 5 * time.Millisecond
		}
		if got.d != want {
			t.Errorf("lazy restore: phase %q = %v, want %v", p.name, got.d, want)
		}
		sum += got.d
	}
	if !whole.ok || sum != whole.d {
		t.Errorf("restore steps add up to %v, the whole restore is %v (seen %v)", sum, whole.d, whole.ok)
	}
	eager := run([]container.RestoreStep{container.StepStaged, container.StepPrepared,
		container.StepContainer, container.StepCRIURestore, container.StepResumed})
	for i, p := range restoreStepPhases("h") {
		if seen, want := eager[p.name].ok, i != 2 && i != 3; seen != want {
			t.Errorf("eager restore: phase %q seen %v, want %v", p.name, seen, want)
		}
	}
}
