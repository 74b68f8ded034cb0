package agent

import (
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/nodeagent/warm"
)

// Refresh enforces the memory budget (dropping least recently used unpinned entries from the page
// cache), re-measures every entry's residency with mincore, and returns all states. Warm flags, and so
// node labels, follow what is really resident, not what was once warmed.
func (a *Agent) Refresh() []State {
	log := klog.FromContext(a.base)
	entries := a.cfg.Store.Entries() // least recently used first
	if a.cfg.MemoryBudget > 0 {
		cands := make([]warm.Candidate, 0, len(entries))
		for _, e := range entries {
			cands = append(cands, warm.Candidate{Path: e.Path, Pinned: len(e.Pinned) > 0})
		}
		dropped, resident, err := warm.EnforceMemoryBudget(cands, a.cfg.MemoryBudget, a.cfg.Locker)
		if err != nil {
			log.Error(err, "Enforcing memory budget")
		}
		if len(dropped) > 0 {
			log.Info("Dropped entries from page cache for the memory budget", "dropped", dropped, "residentBytes", resident, "budget", a.cfg.MemoryBudget)
		}
	}
	if a.cfg.Locker != nil { // release locks of entries evicted from disk
		live := map[string]bool{}
		for _, e := range entries {
			live[e.Path] = true
		}
		for _, p := range a.cfg.Locker.Paths() {
			if !live[p] {
				_ = a.cfg.Locker.Unlock(p)
			}
		}
	}
	var total int64
	for _, e := range entries {
		total += a.refreshOne(e.Hex)
	}
	if a.cfg.Metrics != nil {
		a.cfg.Metrics.ResidentBytes.Set(float64(total))
		a.cfg.Metrics.CachedBytes.Set(float64(a.cfg.Store.UsedBytes()))
		a.cfg.Metrics.Entries.Set(float64(len(entries)))
	}
	return a.States()
}

// refreshOne measures one entry's residency, updates its Warm flag and returns the resident bytes.
func (a *Agent) refreshOne(h string) int64 {
	e, ok := a.cfg.Store.Peek(h)
	if !ok {
		return 0
	}
	r, size, err := warm.Resident(e.Path)
	if err != nil {
		klog.FromContext(a.base).Error(err, "Measuring residency", "digest", h)
		return 0
	}
	a.update(h, func(s *State) {
		s.ResidentBytes = r
		s.SizeBytes = size
		s.Path = e.Path
		s.Warm = size == 0 || float64(r) >= a.cfg.WarmFraction*float64(size)
		if s.Phase == PhasePending || s.Phase == PhaseFailed {
			s.Phase = PhaseReady
			s.BytesCached = size
			s.Message = ""
		}
	})
	return r
}

// residentTotal sums the last measured residency of all states.
func (a *Agent) residentTotal() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var n int64
	for _, s := range a.states {
		n += s.ResidentBytes
	}
	return n
}
