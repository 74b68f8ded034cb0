package health

import (
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
