// Package backoff is the dispatcher's retry schedule: exponential backoff with full jitter
// (AWS Architecture Blog, "Exponential Backoff And Jitter"), capped, with the randomness injected.
package backoff

import (
	"math"
	"time"
)

// Schedule is an exponential backoff: before retry n (1-based) the ceiling is
// min(Max, Initial x 2^(n-1)) and the delay is drawn uniformly in [ceiling/2, ceiling] when
// HalfJitter is set, else in [0, ceiling] (full jitter).
type Schedule struct {
	// Initial is the ceiling before the first retry (> 0).
	Initial time.Duration
	// Max caps every ceiling (>= Initial).
	Max time.Duration
	// HalfJitter keeps at least half the ceiling, so that a retry never follows at once.
	HalfJitter bool
}

// Ceiling is the largest delay before retry n (n >= 1); n < 1 is treated as 1.
func (s Schedule) Ceiling(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	max := s.Max
	if max < s.Initial {
		max = s.Initial
	}
	// Past 2^62 every float product overflows the Duration range: cap first.
	f := float64(s.Initial) * math.Pow(2, float64(n-1))
	if f >= float64(max) || math.IsInf(f, 0) {
		return max
	}
	return time.Duration(f)
}

// Delay is the delay before retry n, given u drawn uniformly from [0, 1).
func (s Schedule) Delay(n int, u float64) time.Duration {
	c := s.Ceiling(n)
	if u < 0 {
		u = 0
	}
	if u >= 1 {
		u = math.Nextafter(1, 0)
	}
	if s.HalfJitter {
		return c/2 + time.Duration(u*float64(c-c/2))
	}
	return time.Duration(u * float64(c))
}
