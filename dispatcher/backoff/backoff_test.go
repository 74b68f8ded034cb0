package backoff

import (
	"testing"
	"time"
)

func TestCeiling(t *testing.T) {
	s := Schedule{Initial: time.Second, Max: 10 * time.Second}
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{
		{-3, time.Second}, {0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second},
		{4, 8 * time.Second}, {5, 10 * time.Second}, {64, 10 * time.Second}, {100000, 10 * time.Second},
	} {
		if got := s.Ceiling(tc.n); got != tc.want {
			t.Errorf("Ceiling(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	if got := (Schedule{Initial: 3 * time.Second, Max: time.Second}).Ceiling(5); got != 3*time.Second {
		t.Errorf("Max below Initial: Ceiling = %v, want Initial", got)
	}
}

func TestDelayJitter(t *testing.T) {
	full := Schedule{Initial: 100 * time.Millisecond, Max: time.Second}
	half := Schedule{Initial: 100 * time.Millisecond, Max: time.Second, HalfJitter: true}
	for _, tc := range []struct {
		name string
		s    Schedule
		n    int
		u    float64
		want time.Duration
	}{
		{"full low", full, 1, 0, 0},
		{"full mid", full, 2, 0.5, 100 * time.Millisecond},
		{"full capped", full, 10, 0.25, 250 * time.Millisecond},
		{"full u above 1 stays below the ceiling", full, 1, 7, 100*time.Millisecond - 1},
		{"negative u is 0", full, 3, -1, 0},
		{"half low", half, 1, 0, 50 * time.Millisecond},
		{"half high", half, 3, 0.5, 300 * time.Millisecond},
		{"half capped", half, 30, 0, 500 * time.Millisecond},
	} {
		if got := tc.s.Delay(tc.n, tc.u); got != tc.want {
			t.Errorf("%s: Delay(%d, %v) = %v, want %v", tc.name, tc.n, tc.u, got, tc.want)
		}
	}
}

// TestDelayBounds sweeps u over [0,1): every delay lies within [0, ceiling] (full) and
// [ceiling/2, ceiling] (half), and the schedule is monotone in u.
func TestDelayBounds(t *testing.T) {
	for _, s := range []Schedule{{Initial: time.Millisecond, Max: time.Minute}, {Initial: time.Second, Max: 5 * time.Second, HalfJitter: true}} {
		for n := 1; n <= 20; n++ {
			c := s.Ceiling(n)
			lo := time.Duration(0)
			if s.HalfJitter {
				lo = c / 2
			}
			prev := time.Duration(-1)
			for i := 0; i < 100; i++ {
				d := s.Delay(n, float64(i)/100)
				if d < lo || d > c || d < prev {
					t.Fatalf("%+v n=%d u=%v: delay %v outside [%v, %v] or below %v", s, n, float64(i)/100, d, lo, c, prev)
				}
				prev = d
			}
		}
	}
}
