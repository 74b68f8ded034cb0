package scalepolicy

import (
	"math"
	"time"
)

// costCap returns the most serving replicas maxCostPerHour allows next to the
// given warm replicas (warm replicas cost as much as serving ones).
func costCap(c CostConstraints, warm int32) (int32, bool) {
	if c.MaxCostPerHour <= 0 || c.CostPerReplicaHour <= 0 {
		return 0, false
	}
	n := int32(math.Floor(c.MaxCostPerHour/c.CostPerReplicaHour+1e-9)) - max(warm, 0)
	return max(n, 0), true
}

// CostMeter accumulates the spend of a pool since UTC midnight, for
// Input.SpentToday. It is pure: the caller reports replica counts with times.
type CostMeter struct {
	// CostPerReplicaHour is the AgentClass cost of one replica-hour.
	CostPerReplicaHour float64
	last               time.Time
	replicas           int32
	spent              float64
}

// Observe records that replicas (serving plus warm) run from now on, charging
// the previous count for the time since the last call, and returns the spend of
// the current UTC day.
func (m *CostMeter) Observe(now time.Time, replicas int32) float64 {
	if !m.last.IsZero() && now.After(m.last) {
		from := m.last
		midnight := now.UTC().Truncate(24 * time.Hour)
		if from.Before(midnight) {
			m.spent = 0
			from = midnight
		}
		m.spent += now.Sub(from).Hours() * float64(m.replicas) * m.CostPerReplicaHour
	}
	m.last, m.replicas = now, replicas
	return m.spent
}
