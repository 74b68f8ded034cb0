package scalepolicy

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"
)

// prefillHist is a cumulative histogram of n prefill times of p seconds each,
// over the bounds of vLLM's request_prefill_time_seconds.
func prefillHist(n, p float64) ([]float64, []float64) {
	bounds := []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, math.Inf(1)}
	cum := make([]float64, len(bounds))
	for i, b := range bounds {
		if p <= b {
			cum[i] = n
		}
	}
	return bounds, cum
}

func TestCapacityModelLearnsPrefillRate(t *testing.T) {
	tests := []struct {
		name      string
		tps       float64 // the replicas' true prefill rate
		seconds   float64 // prefill seconds reported per 5 s decision
		steps     int
		want      float64
		wantLearn bool
	}{
		{"no report: the prior", 3000, 0, 20, 1000, false},
		{"too little prefill observed: the prior", 3000, 0.4, 20, 1000, false},
		{"learned: tokens per prefill second", 3000, 2, 20, 3000, true},
		{"a slower replica is learned too", 500, 2, 20, 500, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := NewCapacityModel(2*time.Second, 0.005, 1000)
			for i := range tc.steps {
				m.Observe(t0.Add(time.Duration(i)*5*time.Second),
					CapacitySample{PromptTokens: tc.tps * tc.seconds, PrefillSeconds: tc.seconds}, 0, false)
			}
			got, learned := m.PrefillTPS()
			if learned != tc.wantLearn || math.Abs(got-tc.want) > 1e-6*tc.want {
				t.Fatalf("PrefillTPS = %v, %v; want %v, %v", got, learned, tc.want, tc.wantLearn)
			}
		})
	}
}

func TestCapacityModelForgetsAnOldRate(t *testing.T) {
	m := NewCapacityModel(2*time.Second, 0.005, 0)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * 5 * time.Second) }
	for i := range 120 { // 10 minutes at 2000 tokens/s
		m.Observe(at(i), CapacitySample{PromptTokens: 4000, PrefillSeconds: 2}, 0, false)
	}
	for i := 120; i < 120+12*60; i++ { // an hour at 1000 tokens/s (three time constants)
		m.Observe(at(i), CapacitySample{PromptTokens: 2000, PrefillSeconds: 2}, 0, false)
	}
	if got, _ := m.PrefillTPS(); got < 1000 || got > 1000*1.06 {
		t.Fatalf("PrefillTPS = %v after an hour at 1000, want within 6%% of 1000", got)
	}
}

func TestCapacityModelAllowance(t *testing.T) {
	tests := []struct {
		name    string
		n, p    float64 // n prefill times of p seconds, 0: no histogram
		slowN   float64 // and slowN of 12 s
		slo     time.Duration
		want    time.Duration
		epsilon time.Duration
	}{
		{"no histogram: half the SLO", 0, 0, 0, 4 * time.Second, 2 * time.Second, 0},
		// Half the slack (the adaptation's margin): the 99.5th percentile
		// is interpolated in the bucket (0, 0.3].
		{"short prefills: half the slack", 1000, 0.25, 0, 4 * time.Second, 1850 * time.Millisecond, 10 * time.Millisecond},
		// 1% of the prefills take 12 s, more than the error budget (0.5%): the
		// 99.5th percentile is in their bucket (10, 15], interpolated.
		{"slow tail beyond the budget", 990, 0.25, 10, 20 * time.Second, (20*time.Second - 12500*time.Millisecond) / 2, 10 * time.Millisecond},
		{"prefill beyond the SLO: no wait allowed", 1000, 12, 0, 4 * time.Second, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := NewCapacityModel(tc.slo, 0.005, 1000)
			s := CapacitySample{}
			if tc.n > 0 {
				b, c := prefillHist(tc.n, tc.p)
				_, slow := prefillHist(tc.slowN, 12)
				for i := range c {
					c[i] += slow[i]
				}
				s.PrefillBounds, s.PrefillCumulative = b, c
			}
			m.Observe(t0, s, 0, false)
			if got := m.Allowance(); got < tc.want-tc.epsilon || got > tc.want+tc.epsilon {
				t.Fatalf("Allowance = %v, want %v ± %v", got, tc.want, tc.epsilon)
			}
		})
	}
}

// needAfter feeds 5 s decisions of the offered tokens/s per step and returns
// the model's need after the last.
func needAfter(t *testing.T, slo time.Duration, prefill float64, offered []float64) float64 {
	t.Helper()
	m := NewCapacityModel(slo, 0.005, 1000)
	b, c := prefillHist(10, prefill)
	var now time.Time
	for i, o := range offered {
		now = t0.Add(time.Duration(i) * 5 * time.Second)
		m.Observe(now, CapacitySample{PrefillBounds: b, PrefillCumulative: c}, o, true)
	}
	n, ok := m.Need(now)
	if !ok {
		t.Fatal("no need")
	}
	return n
}

func TestCapacityModelNeed(t *testing.T) {
	steady := repeatF(100, 4000)
	burst := append(repeatF(98, 200), 8000, 8000) // 10 s at 8000 tokens/s after 200
	tests := []struct {
		name     string
		slo      time.Duration
		prefill  float64
		offered  []float64
		min, max float64
	}{
		// A lasting load needs its mean at the prefill rate, whatever the SLO.
		{"steady load, short SLO", 2 * time.Second, 0.25, steady, 3.6, 4},
		{"steady load, long SLO", 60 * time.Second, 0.25, steady, 3.3, 4},
		// A 10 s burst of 8 replicas' work: with 2 s of SLO it needs nearly
		// all of them; with a minute of SLO, a quarter (10 s of work done
		// within 10 s + half the slack, 30 s).
		{"burst, short SLO", 2 * time.Second, 0.25, burst, 6.1, 8},
		{"burst, long SLO", 60 * time.Second, 0.25, burst, 1.9, 2.1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := needAfter(t, tc.slo, tc.prefill, tc.offered); got < tc.min || got > tc.max {
				t.Fatalf("need %.3f, want in [%v, %v]", got, tc.min, tc.max)
			}
		})
	}
}

func repeatF(n int, v float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// capacityInput is a decision at step i (5 s apart) with offered prompt
// tokens/s, pods that prefill at tps, and first tokens within the margin.
func capacityInput(i int, cur int32, offered, tps float64) Input {
	b, c := prefillHist(10, 0.25)
	return Input{Now: t0.Add(time.Duration(i) * 5 * time.Second), CurrentReplicas: cur, QueueLag: -1,
		Metrics: map[MetricType]MetricValue{TokensPerSecond: {Value: offered / float64(cur), Valid: true}},
		Offered: OfferedDemand{Valid: true, PromptTokensPerSecond: offered},
		TTFT:    TTFTCounts{Total: 10, WithinSLO: 10, WithinMargin: 10},
		Capacity: CapacitySample{PromptTokens: 2.5 * tps, PrefillSeconds: 2.5, PrefillBounds: b,
			PrefillCumulative: c}}
}

func TestAdaptiveCapacitySizesFromTheLearnedRate(t *testing.T) {
	// The pool is configured at 100 tokens/s per replica, but its pods
	// prefill 400 tokens/s; 1,600 tokens/s are offered, steadily, for 40
	// minutes (the needs of the first decisions, at the prior, are
	// remembered for the memory).
	tests := []struct {
		name     string
		capacity bool
		want     int32
	}{
		{"configured target", false, 16},
		{"learned capacity", true, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := adaptivePolicy()
			p.SLO.Adaptive.Capacity = tc.capacity
			a, err := New(p)
			if err != nil {
				t.Fatal(err)
			}
			cur := int32(16)
			var d Decision
			for i := range 480 {
				d = a.Decide(capacityInput(i, cur, 1600, 400))
				cur = d.Desired
			}
			if d.Desired != tc.want {
				t.Fatalf("got %d, want %d: %s", d.Desired, tc.want, d.Message)
			}
		})
	}
}

func TestAdaptiveCapacitySnapshotRestore(t *testing.T) {
	p := adaptivePolicy()
	p.SLO.Adaptive.Capacity = true
	a, _ := New(p)
	cur := int32(4)
	for i := range 40 {
		cur = a.Decide(capacityInput(i, cur, 1600, 400)).Desired
	}
	raw, err := json.Marshal(a.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	var st State
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	if st.Adaptive == nil || st.Adaptive.Capacity == nil || st.Adaptive.Capacity.Seconds <= 0 {
		t.Fatalf("snapshot lacks the capacity model: %+v", st.Adaptive)
	}
	b, _ := New(p)
	b.Restore(st)
	if !reflect.DeepEqual(a.Snapshot().Adaptive, b.Snapshot().Adaptive) {
		t.Fatalf("restored state differs:\n%+v\n%+v", a.Snapshot().Adaptive, b.Snapshot().Adaptive)
	}
	fresh, _ := New(p)
	da, db, df := a.Decide(capacityInput(40, cur, 1600, 400)), b.Decide(capacityInput(40, cur, 1600, 400)),
		fresh.Decide(capacityInput(40, cur, 1600, 400))
	if da.Desired != db.Desired {
		t.Fatalf("restored decided %d, original %d", db.Desired, da.Desired)
	}
	if da.Desired == df.Desired {
		t.Fatalf("a fresh autoscaler decided as the original (%d): the scenario does not exercise the model", df.Desired)
	}
}

func TestAdaptiveMarginIsTheCapacityModelsSlack(t *testing.T) {
	// SLO 2 s, prefills of 0.25 s: the capacity model sizes waits of up to
	// half the slack after the prefill quantile (0.85 s), so a first token
	// of 1.1 s (0.25 s of prefill + 0.85 s of wait) is what the pool was
	// sized for, though beyond half the SLO (1 s). The margin is judged at
	// the sizing's slack: such first tokens keep it and the headroom and
	// memory shrink; first tokens of 1.5 s (waits beyond the allowance) do
	// not.
	tests := []struct {
		name   string
		ttft   float64
		shrink bool
	}{
		{"waits within the capacity model's allowance", 1.1, true},
		{"waits beyond it", 1.5, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := adaptivePolicy()
			p.SLO.Adaptive.Capacity = true
			a, err := New(p)
			if err != nil {
				t.Fatal(err)
			}
			bounds := []float64{0.5, 1, tc.ttft, 2, math.Inf(1)}
			cum := []float64{0, 0, 10, 10, 10}
			pb, pc := prefillHist(10, 0.25)
			cur := int32(4)
			for i := range 480 { // 40 minutes of steady load
				in := capacityInput(i, cur, 1600, 400)
				in.TTFT = HistogramTTFTCounts(bounds, cum, 10, p.SLO.TTFT).WithPrefill(pb, pc, p.SLO.TTFT)
				cur = a.Decide(in).Desired
			}
			st := a.Snapshot().Adaptive
			if shrunk := st.Memory < 15*time.Minute; shrunk != tc.shrink {
				t.Fatalf("memory %v: shrunk %v, want %v", st.Memory, shrunk, tc.shrink)
			}
		})
	}
}

func TestAdaptiveMemoryShrinksOnlyOnExercisedLoad(t *testing.T) {
	// Ten minutes at 1,600 prompt tokens/s (4 replicas' need), then 30
	// minutes at a lower load, every first token within the margin. A margin
	// kept near the remembered peak says a shorter memory would have done; a
	// margin kept far below it (a dip, the quiet after a burst) says nothing
	// about the peak's return, so the memory must not shrink then (before:
	// it shrank on any kept margin and dropped the peak as the load left).
	tests := []struct {
		name    string
		offered float64
		shrink  bool
	}{
		{"load near the remembered peak", 1400, true},
		{"load far below the remembered peak", 200, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := adaptivePolicy()
			p.SLO.Adaptive.Capacity = true
			a, err := New(p)
			if err != nil {
				t.Fatal(err)
			}
			cur := int32(4)
			var mid time.Duration
			for i := range 480 {
				offered := 1600.0
				if i >= 120 {
					offered = tc.offered
				}
				cur = a.Decide(capacityInput(i, cur, offered, 400)).Desired
				if i == 240 { // the peak has left the last 10 minutes
					mid = a.Snapshot().Adaptive.Memory
				}
			}
			end := a.Snapshot().Adaptive.Memory
			if shrunk := end < mid; shrunk != tc.shrink {
				t.Fatalf("memory %v ten minutes into the lower load, %v at the end: shrunk %v, want %v", mid, end, shrunk, tc.shrink)
			}
		})
	}
}

func TestAdaptiveBacklogDrainsOverTheSLOsSlack(t *testing.T) {
	// 400 prompt tokens/s offered to replicas that prefill 400 tokens/s
	// (about one replica of need), under a 20 s SLO; the tokens-in-queue
	// target is what one replica prefills in half the SLO (4,000). Then
	// 30,000 prompt tokens queue. Drained over half the SLO they ask 7.5
	// replicas; with the capacity model and short prefills (slack 19.7 s)
	// they ask 30,000 / (400 x 19.7) = 3.8, and with prefills of 12 s
	// (slack 5 s, shorter than half the SLO) the configured target again.
	tests := []struct {
		name     string
		capacity bool
		prefill  float64
		want     int32
	}{
		{"configured target", false, 0.25, 9},
		{"capacity model: drained over the slack", true, 0.25, 5},
		{"capacity model, slack under half the SLO: the configured target", true, 12, 9},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Policy{MinReplicas: 1, MaxReplicas: 100,
				Metrics: []MetricSpec{{Type: TokensPerSecond, Target: 400}, {Type: TokensInQueue, Target: 400 * 10}},
				SLO: SLOTarget{Enabled: true, TTFT: 20 * time.Second,
					Adaptive: Adaptive{Enabled: true, Attainment: 0.99, Capacity: tc.capacity}}}
			a, err := New(p)
			if err != nil {
				t.Fatal(err)
			}
			b, c := prefillHist(10, tc.prefill)
			cur := int32(1)
			var d Decision
			for i := range 61 {
				queued := 0.0
				if i == 60 {
					queued = 30000
				}
				d = a.Decide(Input{Now: t0.Add(time.Duration(i) * 5 * time.Second), CurrentReplicas: cur, QueueLag: -1,
					Metrics: map[MetricType]MetricValue{TokensPerSecond: {Value: 400 / float64(cur), Valid: true},
						TokensInQueue: {Value: queued / float64(cur), Valid: true}},
					Offered: OfferedDemand{Valid: true, PromptTokensPerSecond: 400},
					TTFT:    TTFTCounts{Total: 10, WithinSLO: 10, WithinMargin: 10},
					Capacity: CapacitySample{PromptTokens: 2000, PrefillSeconds: 5, PrefillBounds: b,
						PrefillCumulative: c}})
				cur = d.Desired
			}
			if d.Desired != tc.want {
				t.Fatalf("got %d, want %d: %s", d.Desired, tc.want, d.Message)
			}
		})
	}
}
