package scalepolicy

import "math"

// startFloor is the adaptive target's floor from the demand now: the need
// plus the replicas that drain the backlog, except that replicas beyond the
// current count (ready and starting) are started only for the backlog that
// outlasts their start. Where the backlog may wait at least a cold start
// (its drain time in seconds, drain, is at least startupLag; 0 when
// unknown), a replica started now serves only the queue left when it is
// ready: the backlog predicted a cold start ahead, the queue now plus what
// the need beyond the pool's mean
// capacity over that cold start adds (the ready replicas plus half of those
// starting, which are on average half-way through their start), never more
// than the backlog now. The current count is kept while the backlog now asks
// for it. Where the drain is shorter than a cold start, a queued request
// runs out of slack before any start could serve it and the backlog is the
// only sign of a rise: the floor is need + backlog as before. (Measured on
// Mooncake synthetic, SLO 97.7 s: the backlog that grew while asked replicas
// started asked for more, ready after the queue had drained; 126 scale ops
// and 25,869 replica-seconds, now 63 and 25,252 at the same 99.69 %.)
func (a *adapter) startFloor(need, backlog, drain, current, ready float64) float64 {
	floor := need + backlog
	if drain < startupLag.Seconds() || floor <= current {
		return floor
	}
	capacity := ready + (current-ready)/2
	ahead := backlog + (need-capacity)*a.coldStart().Seconds()/drain
	return math.Max(current, need+math.Min(math.Max(ahead, 0), backlog))
}
