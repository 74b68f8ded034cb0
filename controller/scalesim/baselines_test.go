package scalesim

import (
	"testing"
)

// viewAt builds a View of a pool with `ready` serving replicas, target `target`,
// and per-second samples whose running+waiting total is given by conc(t).
func viewAt(now float64, ready, target int, conc func(t int) float64) View {
	c := &cluster{m: testModel, target: target, now: now}
	for range ready {
		c.reps = append(c.reps, &replica{st: serving})
	}
	for t := 0; t < int(now); t++ {
		c.samples = append(c.samples, sample{running: conc(t)})
	}
	return View{c}
}

func TestKPA(t *testing.T) {
	flat := func(v float64) func(int) float64 { return func(int) float64 { return v } }
	tests := []struct {
		name         string
		ready, tgt   int
		conc         func(int) float64
		prevPanicked bool
		want         int
	}{
		{"stable: ceil(60s avg / target)", 2, 2, flat(30), false, 3},
		{"panic: 6 s window at 2x target per pod scales on the panic window", 2, 2, func(t int) float64 {
			if t >= 294 {
				return 60
			}
			return 5
		}, false, 6},
		{"scale-down limited to half the ready pods", 8, 8, flat(1), false, 4},
		{"no scale-down while panicking", 6, 6, flat(1), true, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := &KPA{Target: 10, MaxScale: 100, lastNonZero: 299}
			if tc.prevPanicked {
				k.panicking, k.panicStart, k.maxPanicPods = true, 290, 6
			}
			if got := k.Decide(viewAt(300, tc.ready, tc.tgt, tc.conc)); got != tc.want {
				t.Fatalf("got %d, want %d", got, tc.want)
			}
		})
	}
	// Scale to zero only after the stable window plus the grace period without load.
	k := &KPA{Target: 10, MaxScale: 100, lastNonZero: 250}
	if got := k.Decide(viewAt(300, 1, 1, func(int) float64 { return 0 })); got != 1 {
		t.Fatalf("scaled to zero %v s after load, before 90 s", 50)
	}
	if got := k.Decide(viewAt(341, 1, 1, func(int) float64 { return 0 })); got != 0 {
		t.Fatalf("got %d, want 0 after 91 s idle", got)
	}
}

func TestAPA(t *testing.T) {
	tests := []struct {
		name       string
		ready, cur int
		conc       float64 // pool total
		lastScale  float64 // seconds before now; <0: never
		want       int
	}{
		{"within +10% holds", 4, 4, 43, -1, 4},
		{"above band scales up", 4, 4, 60, -1, 6},
		{"scale-up limited to 2x", 2, 2, 100, -1, 4},
		{"below band scales down", 4, 4, 20, -1, 2},
		{"scale-down limited to half", 8, 8, 0, -1, 4},
		{"scale-down waits 300 s after the last scale", 4, 4, 20, 100, 4},
		{"scale-up has no delay", 4, 4, 60, 1, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := &APA{Target: 10, MinReplicas: 1, MaxReplicas: 100}
			if tc.lastScale >= 0 {
				a.scaled, a.lastScale = true, 1000-tc.lastScale
			}
			if got := a.Decide(viewAt(1000, tc.ready, tc.cur, func(int) float64 { return tc.conc })); got != tc.want {
				t.Fatalf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestKEDAScalesToZeroAfterCooldown(t *testing.T) {
	m := testModel
	k := KEDA(m, Config{MaxReplicas: 10, TargetUtilization: 0.7})
	// Some load for 60 s, then nothing: zero replicas 300 s after the last activity,
	// and back to one when load returns.
	var rs []Request
	for i := range 120 {
		rs = append(rs, Request{Arrival: float64(i) / 2, In: 100, Out: 2})
	}
	for i := range 20 {
		rs = append(rs, Request{Arrival: 700 + float64(i), In: 100, Out: 2})
	}
	r := Run(Trace{Name: "idle", Requests: rs}, m, k, 1)
	sawZero := false
	for _, p := range r.Series {
		if p.T > 60+300+30+15 && p.T < 700 && p.Serving == 0 {
			sawZero = true
		}
		if p.T < 300 && p.Serving == 0 {
			t.Fatalf("scaled to zero at %v s, before the cooldown", p.T)
		}
	}
	if !sawZero {
		t.Fatal("never scaled to zero")
	}
	if last := r.Series[len(r.Series)-1]; last.Replicas == 0 && r.Attainment() == 0 {
		t.Fatal("did not come back for the late requests")
	}
}
