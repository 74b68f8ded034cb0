// Package health turns GPU health events (XIDs, lost GPUs, recovery) into device taints for the
// ResourceSlices and into health reports for the kubelet (KEP-4680). Fatal XIDs and lost GPUs taint
// with NoSchedule; other XIDs taint with None (informational) and expire after a while. Recovery
// clears every taint of the GPU. Lost GPUs are probed with exponential backoff until they answer
// again (NVML never reports recovery), and the health of every GPU can be saved and restored
// (Records, Restore) so that taints survive a restart.
package health

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/driver/nvml"
)

// Taint keys of the default driver domain (Monitor.Domain changes the domain).
const (
	TaintXID  = "gpu.neuronetes.io/xid"
	TaintLost = "gpu.neuronetes.io/gpu-lost"
)

// Taint key names after the domain.
const (
	keyXID  = "xid"
	keyLost = "gpu-lost"
)

// fatalXIDs need a reset or replacement of the GPU (double-bit ECC, fallen off the bus, NVLink,
// GSP and uncontained memory errors).
var fatalXIDs = map[uint64]bool{48: true, 62: true, 63: true, 64: true, 74: true, 79: true, 92: true, 94: true, 95: true, 119: true, 120: true, 140: true}

// IsFatal reports whether an XID makes the GPU unusable.
func IsFatal(xid uint64) bool { return fatalXIDs[xid] }

type gpuHealth struct {
	fatalXID uint64
	fatalAt  time.Time
	infoXID  uint64
	infoAt   time.Time
	lost     bool
	lostAt   time.Time
}

func (g gpuHealth) healthy() bool { return !g.lost && g.fatalXID == 0 }

// Monitor holds the health of every GPU. It is safe for concurrent use.
type Monitor struct {
	// InfoTTL is how long an informational XID taint stays; zero keeps it until recovery.
	InfoTTL time.Duration
	// OnEvent, when set, is called for every event handled (metrics).
	OnEvent func(ev nvml.Event, fatal bool)
	// Domain prefixes the taint keys ("<Domain>/xid", "<Domain>/gpu-lost"); empty is
	// gpu.neuronetes.io.
	Domain string
	// Probe, when set, is asked whether a lost GPU answers again (nvml.Backend.Probe): lost GPUs
	// are probed after ProbeMin, then with the delay doubled after every failure up to ProbeMax.
	Probe func(ctx context.Context, uuid string) error
	// ProbeMin and ProbeMax bound the probe delay (defaults 5s and 5m).
	ProbeMin, ProbeMax time.Duration

	mu       sync.Mutex
	gpus     map[string]gpuHealth
	probes   map[string]probeState
	subs     map[chan struct{}]struct{}
	onChange func()
	now      func() time.Time
}

// NewMonitor returns a monitor; onChange (may be nil) is called after every change of taints.
func NewMonitor(onChange func()) *Monitor {
	return &Monitor{gpus: map[string]gpuHealth{}, probes: map[string]probeState{}, subs: map[chan struct{}]struct{}{}, onChange: onChange, now: time.Now}
}

func (m *Monitor) key(name string) string {
	d := m.Domain
	if d == "" {
		d = "gpu.neuronetes.io"
	}
	return d + "/" + name
}

// Handle applies one event and reports whether the taints changed.
func (m *Monitor) Handle(ev nvml.Event) bool {
	m.mu.Lock()
	g := m.gpus[ev.UUID]
	before := g
	fatal := false
	switch ev.Kind {
	case nvml.EventXID:
		if IsFatal(ev.XID) {
			fatal = true
			g.fatalXID, g.fatalAt = ev.XID, ev.Time
		} else {
			g.infoXID, g.infoAt = ev.XID, ev.Time
		}
	case nvml.EventLost:
		fatal = true
		if !g.lost {
			g.lost, g.lostAt = true, ev.Time
			m.probes[ev.UUID] = m.firstProbe(ev.Time)
		}
	case nvml.EventRecovered:
		g = gpuHealth{}
		delete(m.probes, ev.UUID)
	}
	if g == (gpuHealth{}) {
		delete(m.gpus, ev.UUID)
	} else {
		m.gpus[ev.UUID] = g
	}
	changed := g != before
	m.mu.Unlock()
	if m.OnEvent != nil {
		m.OnEvent(ev, fatal)
	}
	if changed {
		m.changed()
	}
	return changed
}

func (m *Monitor) changed() {
	m.mu.Lock()
	for ch := range m.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	m.mu.Unlock()
	if m.onChange != nil {
		m.onChange()
	}
}

// expire drops informational XIDs older than InfoTTL; it reports whether anything changed.
func (m *Monitor) expire() bool {
	if m.InfoTTL <= 0 {
		return false
	}
	m.mu.Lock()
	changed := false
	for u, g := range m.gpus {
		if g.infoXID != 0 && m.now().Sub(g.infoAt) > m.InfoTTL {
			g.infoXID, g.infoAt = 0, time.Time{}
			changed = true
			if g == (gpuHealth{}) {
				delete(m.gpus, u)
			} else {
				m.gpus[u] = g
			}
		}
	}
	m.mu.Unlock()
	if changed {
		m.changed()
	}
	return changed
}

// Run consumes events, expires informational taints and probes lost GPUs until ctx ends.
func (m *Monitor) Run(ctx context.Context, events <-chan nvml.Event) {
	logger := klog.FromContext(ctx)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastExpire := m.now()
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-events:
			logger.Info("GPU health event", "gpu", ev.UUID, "kind", ev.Kind, "xid", ev.XID, "fatal", ev.Kind == nvml.EventLost || IsFatal(ev.XID))
			m.Handle(ev)
		case <-tick.C:
			if m.now().Sub(lastExpire) >= 10*time.Second {
				m.expire()
				lastExpire = m.now()
			}
			m.ProbeDue(ctx)
		}
	}
}

// Taints returns the device taints of every GPU with a health problem, keyed by GPU UUID.
func (m *Monitor) Taints() map[string][]resourceapi.DeviceTaint {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]resourceapi.DeviceTaint{}
	for u, g := range m.gpus {
		var ts []resourceapi.DeviceTaint
		if g.lost {
			ts = append(ts, resourceapi.DeviceTaint{Key: m.key(keyLost), Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: ptrTime(g.lostAt)})
		}
		switch {
		case g.fatalXID != 0:
			ts = append(ts, resourceapi.DeviceTaint{Key: m.key(keyXID), Value: strconv.FormatUint(g.fatalXID, 10), Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: ptrTime(g.fatalAt)})
		case g.infoXID != 0:
			ts = append(ts, resourceapi.DeviceTaint{Key: m.key(keyXID), Value: strconv.FormatUint(g.infoXID, 10), Effect: resourceapi.DeviceTaintEffectNone, TimeAdded: ptrTime(g.infoAt)})
		}
		sort.Slice(ts, func(i, j int) bool { return ts[i].Key < ts[j].Key })
		if len(ts) > 0 {
			out[u] = ts
		}
	}
	return out
}

// Healthy reports whether a GPU has no fatal problem.
func (m *Monitor) Healthy(uuid string) (bool, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g, ok := m.gpus[uuid]
	if !ok || g.healthy() {
		return true, ""
	}
	if g.lost {
		return false, "GPU lost"
	}
	return false, "fatal XID " + strconv.FormatUint(g.fatalXID, 10)
}

// Subscribe returns a channel that receives a signal after every change, and a cancel function.
func (m *Monitor) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	m.subs[ch] = struct{}{}
	m.mu.Unlock()
	return ch, func() {
		m.mu.Lock()
		delete(m.subs, ch)
		m.mu.Unlock()
	}
}

func ptrTime(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	mt := metav1.NewTime(t.Truncate(time.Second))
	return &mt
}
