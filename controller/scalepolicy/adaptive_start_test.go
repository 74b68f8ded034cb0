package scalepolicy

import (
	"testing"
	"time"
)

func TestAdaptiveStartsOnlyForABacklogThatOutlastsTheStart(t *testing.T) {
	// 400 prompt tokens/s offered to replicas that prefill 400 tokens/s
	// with short prefills; the pool has asked 6 replicas, 2 ready and 4
	// starting, when a queue forms. Under a 200 s SLO the backlog drains
	// over the slack (about 200 s of one replica's prefill, more than a
	// cold start): a queue of 6 replicas' drain and a need of 0.75 want 7
	// (6.75), but the pool's mean capacity over the next cold start (2
	// ready + half of the 4 starting) exceeds the need by 3.25, which
	// drains 3.25 x 60 / 200 = 0.98 replicas' worth of the queue before a
	// seventh could be ready: 5.77, so the pool keeps its 6. A queue of 13
	// outlasts the start: 13.77 -> 14 before, 12.77 -> 13 now. Under a 20 s
	// SLO the queue's requests run out of slack before any start could
	// serve them: need + backlog as before (6.97 -> 7).
	tests := []struct {
		name   string
		slo    time.Duration
		queued float64 // in replicas of the drain target
		want   int32
	}{
		{"long SLO, a backlog the starting replicas drain: no start", 200 * time.Second, 6, 6},
		{"long SLO, a backlog beyond them: started", 200 * time.Second, 13, 13},
		{"short SLO: need + backlog", 20 * time.Second, 6, 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Policy{MinReplicas: 1, MaxReplicas: 100,
				Metrics: []MetricSpec{{Type: TokensPerSecond, Target: 400}, {Type: TokensInQueue, Target: 400 * tc.slo.Seconds() / 2}},
				SLO: SLOTarget{Enabled: true, TTFT: tc.slo,
					Adaptive: Adaptive{Enabled: true, Attainment: 0.99, Capacity: true}}}
			a, err := New(p)
			if err != nil {
				t.Fatal(err)
			}
			b, c := prefillHist(10, 0.25)
			in := func(i int, cur, ready int32, queued float64) Input {
				return Input{Now: t0.Add(time.Duration(i) * 5 * time.Second), CurrentReplicas: cur, ReadyReplicas: ready, QueueLag: -1,
					Metrics: map[MetricType]MetricValue{TokensPerSecond: {Value: 400 / float64(ready), Valid: true},
						TokensInQueue: {Value: queued / float64(ready), Valid: true}},
					Offered: OfferedDemand{Valid: true, PromptTokensPerSecond: 400},
					TTFT:    TTFTCounts{Total: 10, WithinSLO: 10, WithinMargin: 10},
					Capacity: CapacitySample{PromptTokens: 2000, PrefillSeconds: 5, PrefillBounds: b,
						PrefillCumulative: c}}
			}
			for i := range 60 {
				a.Decide(in(i, 2, 2, 0))
			}
			drain, ok := a.adapt.capacity.QueueDrain()
			if !ok || drain < 400*tc.slo.Seconds()/2 {
				drain = 400 * tc.slo.Seconds() / 2
			}
			d := a.Decide(in(60, 6, 2, tc.queued*drain))
			if d.Desired != tc.want {
				t.Fatalf("got %d, want %d: %s", d.Desired, tc.want, d.Message)
			}
		})
	}
}
