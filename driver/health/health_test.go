package health

import (
	"context"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/neuronetes/neuronetes/driver/nvml"
)

func TestMonitor(t *testing.T) {
	changes := 0
	m := NewMonitor(func() { changes++ })
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.now = func() time.Time { return now }
	m.InfoTTL = time.Minute
	sub, cancel := m.Subscribe()
	defer cancel()
	type want struct {
		effect  resourceapi.DeviceTaintEffect
		key     string
		value   string
		healthy bool
	}
	steps := []struct {
		name string
		ev   nvml.Event
		want *want // nil: no taints on GPU-a
	}{
		{"informational xid", nvml.Event{UUID: "GPU-a", Kind: nvml.EventXID, XID: 31, Time: now}, &want{resourceapi.DeviceTaintEffectNone, TaintXID, "31", true}},
		{"fatal xid", nvml.Event{UUID: "GPU-a", Kind: nvml.EventXID, XID: 79, Time: now}, &want{resourceapi.DeviceTaintEffectNoSchedule, TaintXID, "79", false}},
		{"recovered", nvml.Event{UUID: "GPU-a", Kind: nvml.EventRecovered, Time: now}, nil},
		{"lost", nvml.Event{UUID: "GPU-a", Kind: nvml.EventLost, Time: now}, &want{resourceapi.DeviceTaintEffectNoSchedule, TaintLost, "", false}},
		{"recovered again", nvml.Event{UUID: "GPU-a", Kind: nvml.EventRecovered, Time: now}, nil},
	}
	for _, st := range steps {
		if !m.Handle(st.ev) {
			t.Errorf("%s: no change reported", st.name)
		}
		select {
		case <-sub:
		default:
			t.Errorf("%s: subscriber not notified", st.name)
		}
		ts := m.Taints()["GPU-a"]
		healthy, _ := m.Healthy("GPU-a")
		if st.want == nil {
			if len(ts) != 0 || !healthy {
				t.Errorf("%s: taints %v healthy %v, want none", st.name, ts, healthy)
			}
			continue
		}
		if len(ts) != 1 || ts[0].Key != st.want.key || ts[0].Value != st.want.value || ts[0].Effect != st.want.effect || healthy != st.want.healthy {
			t.Errorf("%s: taints %+v healthy %v, want %+v", st.name, ts, healthy, *st.want)
		}
	}
	if changes != len(steps) {
		t.Errorf("onChange called %d times, want %d", changes, len(steps))
	}
	// Informational taints expire; fatal ones do not.
	m.Handle(nvml.Event{UUID: "GPU-b", Kind: nvml.EventXID, XID: 13, Time: now})
	m.Handle(nvml.Event{UUID: "GPU-c", Kind: nvml.EventXID, XID: 48, Time: now})
	now = now.Add(2 * time.Minute)
	if !m.expire() {
		t.Error("expire changed nothing")
	}
	taints := m.Taints()
	if _, ok := taints["GPU-b"]; ok {
		t.Errorf("informational taint did not expire")
	}
	if _, ok := taints["GPU-c"]; !ok {
		t.Errorf("fatal taint expired")
	}
	if m.Handle(nvml.Event{UUID: "GPU-z", Kind: nvml.EventRecovered, Time: now}) {
		t.Errorf("recovering a healthy GPU reported a change")
	}
}

// TestLostGPUProbedWithBackoff: a lost GPU is tainted and probed with exponential backoff, never
// before its probe is due; when it answers again its taint is cleared.
func TestLostGPUProbedWithBackoff(t *testing.T) {
	m := NewMonitor(nil)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.now = func() time.Time { return now }
	m.Domain = "gpu.nvidia.com"
	m.ProbeMin, m.ProbeMax = time.Second, 4*time.Second
	answers := false
	var probed []time.Duration
	start := now
	m.Probe = func(_ context.Context, uuid string) error {
		probed = append(probed, now.Sub(start))
		if answers {
			return nil
		}
		return nvml.ErrGPULost
	}
	m.Handle(nvml.Event{UUID: "GPU-a", Kind: nvml.EventLost, Time: now})
	if ts := m.Taints()["GPU-a"]; len(ts) != 1 || ts[0].Key != "gpu.nvidia.com/gpu-lost" || ts[0].Effect != resourceapi.DeviceTaintEffectNoSchedule {
		t.Fatalf("taints of a lost GPU: %+v", ts)
	}
	// Step the clock by 100 ms for 12 s: probes at 1, 3 (1+2), 7 (3+4) and 11 (7+4) seconds.
	for i := 0; i < 120; i++ {
		now = now.Add(100 * time.Millisecond)
		m.ProbeDue(context.Background())
	}
	want := []time.Duration{time.Second, 3 * time.Second, 7 * time.Second, 11 * time.Second}
	if len(probed) != len(want) {
		t.Fatalf("probes at %v, want %v", probed, want)
	}
	for i := range want {
		if probed[i] != want[i] {
			t.Errorf("probe %d at %v, want %v", i, probed[i], want[i])
		}
	}
	answers = true
	now = now.Add(4 * time.Second)
	m.ProbeDue(context.Background())
	if ts := m.Taints()["GPU-a"]; len(ts) != 0 {
		t.Errorf("taints after the GPU answers: %+v", ts)
	}
	if due := m.ProbeDue(context.Background()); len(due) != 0 {
		t.Errorf("a recovered GPU is still probed: %v", due)
	}
}

// TestRecordsRestore: the health survives a restart through Records and Restore, and a restored
// lost GPU is probed again.
func TestRecordsRestore(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := NewMonitor(nil)
	m.now = func() time.Time { return now }
	m.Handle(nvml.Event{UUID: "GPU-a", Kind: nvml.EventLost, Time: now})
	m.Handle(nvml.Event{UUID: "GPU-b", Kind: nvml.EventXID, XID: 79, Time: now})
	m.Handle(nvml.Event{UUID: "GPU-c", Kind: nvml.EventXID, XID: 31, Time: now})
	rec := m.Records()
	changes := 0
	m2 := NewMonitor(func() { changes++ })
	m2.now = func() time.Time { return now }
	probes := 0
	m2.Probe = func(context.Context, string) error { probes++; return nvml.ErrGPULost }
	m2.Restore(rec)
	if changes != 1 {
		t.Errorf("restore reported %d changes, want 1", changes)
	}
	for _, u := range []string{"GPU-a", "GPU-b", "GPU-c"} {
		a, b := m.Taints()[u], m2.Taints()[u]
		if len(a) == 0 || len(a) != len(b) || a[0].Key != b[0].Key || a[0].Value != b[0].Value || a[0].Effect != b[0].Effect || !a[0].TimeAdded.Equal(b[0].TimeAdded) {
			t.Errorf("%s: taints %+v after restore, want %+v", u, b, a)
		}
	}
	now = now.Add(time.Minute)
	m2.ProbeDue(context.Background())
	if probes != 1 {
		t.Errorf("restored lost GPU probed %d times, want 1", probes)
	}
}
