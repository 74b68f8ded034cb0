package health

import (
	"context"
	"sort"
	"time"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/driver/checkpoint"
	"github.com/neuronetes/neuronetes/driver/nvml"
)

// probeState is when a lost GPU is probed next and the delay after that if it still fails.
type probeState struct {
	at    time.Time
	delay time.Duration
}

func (m *Monitor) probeBounds() (time.Duration, time.Duration) {
	lo, hi := m.ProbeMin, m.ProbeMax
	if lo <= 0 {
		lo = 5 * time.Second
	}
	if hi < lo {
		hi = max(lo, 5*time.Minute)
	}
	return lo, hi
}

func (m *Monitor) firstProbe(now time.Time) probeState {
	lo, _ := m.probeBounds()
	return probeState{at: now.Add(lo), delay: lo}
}

// ProbeDue probes every lost GPU whose probe is due: one that answers is recovered, one that does
// not is probed again after twice the delay (at most ProbeMax). It returns the GPUs probed.
func (m *Monitor) ProbeDue(ctx context.Context) []string {
	if m.Probe == nil {
		return nil
	}
	m.mu.Lock()
	now := m.now()
	var due []string
	for u, p := range m.probes {
		if !p.at.After(now) {
			due = append(due, u)
		}
	}
	m.mu.Unlock()
	sort.Strings(due)
	for _, u := range due {
		err := m.Probe(ctx, u)
		if err == nil {
			klog.FromContext(ctx).Info("Lost GPU answers again", "gpu", u)
			m.Handle(nvml.Event{UUID: u, Kind: nvml.EventRecovered, Time: now})
			continue
		}
		_, hi := m.probeBounds()
		m.mu.Lock()
		if p, ok := m.probes[u]; ok {
			p.delay = min(2*p.delay, hi)
			p.at = now.Add(p.delay)
			m.probes[u] = p
		}
		m.mu.Unlock()
		klog.FromContext(ctx).V(2).Info("Lost GPU still does not answer", "gpu", u, "err", err)
	}
	return due
}

// Records returns the health of every GPU with a problem, for the checkpoint.
func (m *Monitor) Records() map[string]checkpoint.Health {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]checkpoint.Health{}
	for u, g := range m.gpus {
		r := checkpoint.Health{FatalXID: g.fatalXID, FatalAt: g.fatalAt, InfoXID: g.infoXID, InfoAt: g.infoAt}
		if g.lost {
			r.Lost = g.lostAt
		}
		out[u] = r
	}
	return out
}

// Restore replaces the health of every GPU with recorded health (at start-up, before Run): lost
// GPUs are probed again from ProbeMin on.
func (m *Monitor) Restore(records map[string]checkpoint.Health) {
	m.mu.Lock()
	m.gpus = map[string]gpuHealth{}
	m.probes = map[string]probeState{}
	now := m.now()
	for u, r := range records {
		g := gpuHealth{fatalXID: r.FatalXID, fatalAt: r.FatalAt, infoXID: r.InfoXID, infoAt: r.InfoAt, lost: !r.Lost.IsZero(), lostAt: r.Lost}
		if g == (gpuHealth{}) {
			continue
		}
		m.gpus[u] = g
		if g.lost {
			m.probes[u] = m.firstProbe(now)
		}
	}
	m.mu.Unlock()
	m.changed()
}
