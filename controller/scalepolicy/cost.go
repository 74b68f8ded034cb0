package scalepolicy

import (
	"math"
	"time"
)

// costCap returns the most serving replicas maxCostPerHour allows next to the
// given warm replicas (warm replicas cost as much as serving ones), at price
// $/hour per replica (the pool's current mean from the node price model, else
// the AgentClass cost per replica-hour).
func costCap(c CostConstraints, warm int32, price float64) (int32, bool) {
	if price <= 0 {
		price = c.CostPerReplicaHour
	}
	if c.MaxCostPerHour <= 0 || price <= 0 {
		return 0, false
	}
	n := int32(math.Floor(c.MaxCostPerHour/price+1e-9)) - max(warm, 0)
	return max(n, 0), true
}

// CostMeter accumulates the spend of a pool since UTC midnight, for
// Input.SpentToday. It is pure: the caller reports spend rates (ObserveRate, $/hour
// from the node price model) or replica counts (Observe, at CostPerReplicaHour)
// with times.
type CostMeter struct {
	// CostPerReplicaHour is the AgentClass cost of one replica-hour, used by Observe.
	CostPerReplicaHour float64
	last               time.Time
	replicas           int32
	rate               float64
	rateSet            bool
	spent              float64
}

// Observe records that replicas (serving plus warm) run from now on at
// CostPerReplicaHour each; see ObserveRate.
func (m *CostMeter) Observe(now time.Time, replicas int32) float64 {
	spent := m.charge(now)
	m.replicas, m.rate, m.rateSet = replicas, float64(replicas)*m.CostPerReplicaHour, true
	return spent
}

// ObserveRate records that the pool spends perHour $/hour from now on, charging
// the previous rate for the time since the last call, and returns the spend of
// the current UTC day.
func (m *CostMeter) ObserveRate(now time.Time, perHour float64) float64 {
	spent := m.charge(now)
	m.rate, m.rateSet = max(perHour, 0), true
	return spent
}

func (m *CostMeter) charge(now time.Time) float64 {
	if !m.last.IsZero() && now.After(m.last) {
		from := m.last
		midnight := now.UTC().Truncate(24 * time.Hour)
		if from.Before(midnight) {
			m.spent = 0
			from = midnight
		}
		rate := m.rate
		if !m.rateSet { // restored from a state written before rates were kept
			rate = float64(m.replicas) * m.CostPerReplicaHour
		}
		m.spent += now.Sub(from).Hours() * rate
	}
	if now.After(m.last) {
		m.last = now
	}
	return m.spent
}

// Day is the UTC day (YYYY-MM-DD) of the spend the meter holds ("" before the first observation).
func (m *CostMeter) Day() string {
	if m.last.IsZero() {
		return ""
	}
	return m.last.UTC().Format(time.DateOnly)
}
