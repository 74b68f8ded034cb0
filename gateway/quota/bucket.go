// Package quota enforces tenants' quotas per pool (token buckets on requests and on tokens, and a
// concurrency cap) in a store shared by the gateway replicas (Redis) or in memory, and admits
// requests to an overloaded pool by priority. The bucket arithmetic is pure and shared by both
// stores (the Redis store runs the same rules in a Lua script).
package quota

import (
	"math"
	"time"
)

// Bucket is a token bucket's state: its level and when it was last updated. The level may be
// negative: a request larger than the bucket is admitted into debt when the bucket is full, and
// billed usage above the estimate is taken afterwards.
type Bucket struct {
	Level float64
	At    time.Time
	// Set is false for a bucket never used (it starts full).
	Set bool
}

// Level returns the bucket's level at now, refilled at rate per second up to burst.
func (b Bucket) LevelAt(rate, burst float64, now time.Time) float64 {
	if !b.Set {
		return burst
	}
	el := now.Sub(b.At).Seconds()
	if el < 0 {
		el = 0
	}
	return math.Min(burst, b.Level+el*rate)
}

// Need is how many tokens the bucket at level lacks before cost can be taken: a cost above
// burst needs a full bucket.
func Need(level, cost, burst float64) float64 {
	c := math.Min(cost, burst)
	if level >= c {
		return 0
	}
	return c - level
}

// Take takes cost from the bucket at now if it can. When it cannot, wait is how long the refill
// takes.
func Take(b Bucket, rate, burst, cost float64, now time.Time) (Bucket, bool, time.Duration) {
	l := b.LevelAt(rate, burst, now)
	if n := Need(l, cost, burst); n > 0 {
		return b, false, seconds(n / rate)
	}
	return Bucket{Level: l - cost, At: now, Set: true}, true, 0
}

// Adjust adds delta (a refund when positive, a debit when negative) to the bucket at now,
// capped at burst.
func Adjust(b Bucket, rate, burst, delta float64, now time.Time) Bucket {
	l := b.LevelAt(rate, burst, now)
	return Bucket{Level: math.Min(burst, l+delta), At: now, Set: true}
}

func seconds(s float64) time.Duration {
	return time.Duration(math.Ceil(s * float64(time.Second)))
}
