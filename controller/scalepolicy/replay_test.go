package scalepolicy

import (
	"math"
	"testing"
	"time"
)

var testReplayModel = ReplayModel{Bin: 10 * time.Second, ColdStart: 60 * time.Second, Allowance: 5 * time.Second}

func steps(n int, levels ...float64) []float64 {
	var out []float64
	for _, l := range levels {
		for range n {
			out = append(out, l)
		}
	}
	return out
}

func TestReplay(t *testing.T) {
	for _, tc := range []struct {
		name       string
		need       []float64
		scale      float64
		memory     time.Duration
		wantMissed func(float64) bool
		wantCost   float64 // replica-seconds; 0: not checked
	}{
		{"steady load at scale 1: capacity equals need, no wait", steps(30, 4), 1, 70 * time.Second,
			func(m float64) bool { return m == 0 }, 30 * 4 * 10},
		{"steady load at scale 0.5: the need floor holds the need, as at scale 1", steps(30, 4), 0.5, 70 * time.Second,
			func(m float64) bool { return m == 0 }, 30 * 4 * 10},
		{"a step up waits a cold start for capacity", steps(20, 2, 8), 1, 70 * time.Second,
			func(m float64) bool { return m > 0.1 }, 0},
		{"a long memory with headroom misses only the first burst", append(append(steps(10, 2, 8), steps(20, 2)...), steps(10, 8)...),
			1.2, 20 * time.Minute, func(m float64) bool { return m > 0.1 && m < 0.3 }, 0},
		{"with a short memory the burst waits again when it recurs", append(append(steps(10, 2, 8), steps(20, 2)...), steps(10, 8)...),
			1.2, 70 * time.Second, func(m float64) bool { return m > 0.4 }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Replay(tc.need, testReplayModel, tc.scale, tc.memory)
			if !tc.wantMissed(r.Missed) {
				t.Fatalf("missed %.4f", r.Missed)
			}
			if tc.wantCost > 0 && math.Abs(r.ReplicaSeconds-tc.wantCost) > 1e-6 {
				t.Fatalf("cost %.0f, want %.0f", r.ReplicaSeconds, tc.wantCost)
			}
		})
	}
}

func TestOverShare(t *testing.T) {
	for _, tc := range []struct{ w0, w1, allow, want float64 }{
		{0, 4, 5, 0}, {6, 8, 5, 1}, {0, 10, 5, 0.5}, {10, 0, 5, 0.5}, {4, 8, 5, 0.75},
	} {
		if got := overShare(tc.w0, tc.w1, tc.allow); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("overShare(%v, %v, %v) = %v, want %v", tc.w0, tc.w1, tc.allow, got, tc.want)
		}
	}
}

func TestUnforeseeableExcusesOnlyAFirstBurstBeyondEveryCandidate(t *testing.T) {
	top := replayScales[len(replayScales)-1]
	need := append(steps(10, 1), steps(2, 2*top)...) // a burst beyond top x every earlier need
	need = append(need, steps(20, 1)...)
	need = append(need, steps(2, 2*top)...) // its recurrence: a long memory could hold it
	skip := unforeseeable(need, testReplayModel)
	cold := binsOf(testReplayModel.ColdStart, testReplayModel.Bin)
	for i, s := range skip {
		want := i >= 10 && i <= 10+cold
		if s != want {
			t.Fatalf("bin %d skipped %v, want %v (%v)", i, s, want, skip)
		}
	}
}

func TestChooseRobust(t *testing.T) {
	t.Run("a load that steps up: enough scale for the step's cold start", func(t *testing.T) {
		need := steps(30, 4, 6, 4, 6, 4, 6)
		c := ChooseRobust(need, testReplayModel, 0.005, 0.01)
		if !c.Met || c.Scale < 1.1 {
			t.Fatalf("choice %+v, want a scale of at least 1.1 (steps of 50%% with a 20-minute memory remembered)", c)
		}
		if low := Replay(need, testReplayModel, 0.9, c.Memory); low.Missed <= 0.005 {
			t.Fatalf("scale 0.9 misses %.4f: the test proves nothing", low.Missed)
		}
	})
	t.Run("recurring bursts: a memory that spans them", func(t *testing.T) {
		var need []float64
		for range 6 {
			need = append(need, steps(3, 10)...)
			need = append(need, steps(45, 2)...)
		}
		c := ChooseRobust(need, testReplayModel, 0.005, 0.01)
		if !c.Met || c.Memory < 10*time.Minute {
			t.Fatalf("choice %+v, want a memory of at least 10 minutes (bursts every 8 minutes)", c)
		}
		short := Replay(need, testReplayModel, c.Scale, 70*time.Second)
		if short.Missed <= 0.01 {
			t.Fatalf("the short memory misses %.4f: the test proves nothing", short.Missed)
		}
	})
}

func TestRobustAdapterChoosesFromTheLog(t *testing.T) {
	steady := repeat(120, adaptStep{demand: 400, total: 10}) // 10 minutes at 5 s, need 4
	_, plain := runSteps(t, adaptivePolicy(), steady)
	if plain.Scale != 0 {
		t.Fatalf("without Robust the scale is %v, want none", plain.Scale)
	}
	p := adaptivePolicy()
	p.SLO.Adaptive.Robust = true
	ds, st := runSteps(t, p, steady)
	if st.Scale <= 0 || st.Headroom != 1 || st.Memory != replayMemories[0] {
		t.Fatalf("robust choice scale %.2f x correction %.3f, memory %s; want a scale x 1 and the cheapest memory %s on a steady load",
			st.Scale, st.Headroom, st.Memory, replayMemories[0])
	}
	if got, want := ds[len(ds)-1].Desired, int32(math.Ceil(math.Max(st.Scale, 1)*4-1e-9)); got != want {
		t.Fatalf("desired %d, want %d (max(scale x 4, the need 4))", got, want)
	}
}

func TestObserveStartMeasuresColdStart(t *testing.T) {
	a := newAdapter(SLOTarget{TTFT: 2 * time.Second}, 0)
	t0 := time.Unix(1_800_000_000, 0)
	for i, rc := range [][2]int32{{2, 2}, {2, 4}, {2, 4}, {4, 4}} { // ready, current every 20 s
		a.observeStart(t0.Add(time.Duration(i)*20*time.Second), rc[0], rc[1])
	}
	if a.st.ColdStart != 40*time.Second || a.coldStart() != 40*time.Second {
		t.Fatalf("cold start %s, want 40s", a.st.ColdStart)
	}
	if b := newAdapter(SLOTarget{TTFT: 2 * time.Second}, 0); b.coldStart() != defaultColdStart {
		t.Fatalf("unmeasured cold start %s, want %s", b.coldStart(), defaultColdStart)
	}
}

func TestCalibrate(t *testing.T) {
	need := steps(60, 4)
	ready := steps(60, 4) // exactly the need: the model predicts no wait
	if e := Calibrate(need, ready, nil, testReplayModel, 0); e != 1 {
		t.Fatalf("efficiency %v with nothing observed, want 1", e)
	}
	e := Calibrate(need, ready, nil, testReplayModel, 0.2)
	if e >= 1 || e < calibrationSteps[len(calibrationSteps)-1] {
		t.Fatalf("efficiency %v with 20%% observed misses, want below 1", e)
	}
	m := testReplayModel
	m.Efficiency = e
	if got := ReplayReady(need, ready, nil, m); got < 0.2 {
		t.Fatalf("calibrated model predicts %.3f, want at least the observed 0.2", got)
	}
	skip := make([]bool, len(need))
	for i := range skip {
		skip[i] = true
	}
	if got := ReplayReady(need, ready, skip, m); got != 0 {
		t.Fatalf("every bin skipped: predicted %v, want 0", got)
	}
}

// BenchmarkChooseRobust times one choice on an hour of 10 s bins.
func BenchmarkChooseRobust(b *testing.B) {
	var need []float64
	for i := range 360 {
		need = append(need, 4+3*math.Sin(float64(i)/9)+float64(i%7)/3)
	}
	for b.Loop() {
		ChooseRobust(need, testReplayModel, 0.005, 0.01)
	}
}

func TestRobustLogIsTheOfferedDemand(t *testing.T) {
	p := adaptivePolicy()
	p.Metrics = append(p.Metrics, MetricSpec{Type: ConcurrentSessions, Target: 10})
	p.SLO.Adaptive.Robust = true
	a, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		a.Decide(Input{Now: t0.Add(time.Duration(i) * 5 * time.Second), CurrentReplicas: 4, ReadyReplicas: 4, QueueLag: -1,
			// 80 running sequences per replica: a backlog flush reads 32 replicas of need;
			// 200 offered prompt tokens/s are 2 replicas.
			Metrics: map[MetricType]MetricValue{TokensPerSecond: {Value: 900, Valid: true}, ConcurrentSessions: {Value: 80, Valid: true}},
			Offered: OfferedDemand{Valid: true, PromptTokensPerSecond: 200}})
	}
	st := a.Snapshot().Adaptive
	var work, span float64
	for _, b := range st.Bins {
		work, span = work+b.Work, span+b.Span
	}
	if span == 0 || math.Abs(work/span-2) > 1e-9 {
		t.Fatalf("logged need %.3f, want the offered 2 replicas", work/span)
	}
}
