package scalepolicy

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC) // a Monday

// step is one Decide call of a scenario.
type step struct {
	at         time.Duration // since t0
	cur        int32
	warm       int32
	m          map[MetricType]float64 // valid metrics
	missing    []MetricType           // present but invalid
	lag        int64
	spent      float64
	override   *Override
	want       int32
	wantReason Reason
}

func qd(v float64) map[MetricType]float64 { return map[MetricType]float64{QueueDepth: v} }

func queuePolicy() Policy {
	return Policy{MinReplicas: 1, MaxReplicas: 50, Metrics: []MetricSpec{{Type: QueueDepth, Target: 10}}}
}

func run(t *testing.T, p Policy, steps []step) []Decision {
	t.Helper()
	a, err := New(p)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	var out []Decision
	for i, s := range steps {
		in := Input{Now: t0.Add(s.at), CurrentReplicas: s.cur, WarmReplicas: s.warm, QueueLag: s.lag, SpentToday: s.spent,
			Override: s.override, Metrics: map[MetricType]MetricValue{}}
		if s.lag == 0 {
			in.QueueLag = -1
			if p.Lag.Enabled {
				in.QueueLag = 0
			}
		}
		for k, v := range s.m {
			in.Metrics[k] = MetricValue{Value: v, Valid: true}
		}
		for _, k := range s.missing {
			in.Metrics[k] = MetricValue{}
		}
		d := a.Decide(in)
		if d.Desired != s.want || (s.wantReason != "" && d.Reason != s.wantReason) {
			t.Fatalf("step %d: got %d (%s: %s), want %d (%s)", i, d.Desired, d.Reason, d.Message, s.want, s.wantReason)
		}
		out = append(out, d)
	}
	return out
}

func TestDecide(t *testing.T) {
	two := func(s Strategy) Policy {
		p := queuePolicy()
		p.Strategy = s
		p.Metrics = append(p.Metrics, MetricSpec{Type: TokensInQueue, Target: 1000})
		return p
	}
	with := func(f func(*Policy)) Policy { p := queuePolicy(); f(&p); return p }
	slo := func(f func(*Policy)) Policy {
		return with(func(p *Policy) {
			p.SLO = SLOTarget{Enabled: true, TTFT: 500 * time.Millisecond, HeadroomPercent: 20}
			p.Behavior.ScaleUp = ScalingRules{StabilizationWindow: time.Minute, MaxChangeAbsolute: 1, Period: time.Minute}
			p.CooldownPeriod = 5 * time.Minute
			f(p)
		})
	}
	tests := []struct {
		name  string
		p     Policy
		steps []step
	}{
		{"ratio scales up by ceil(ratio*replicas)", queuePolicy(), []step{{cur: 2, m: qd(25), want: 5, wantReason: ReasonMetrics}}},
		{"ratio scales down", queuePolicy(), []step{{cur: 6, m: qd(2), want: 2, wantReason: ReasonMetrics}}},
		{"default tolerance 0.1 holds", queuePolicy(), []step{{cur: 4, m: qd(10.9), want: 4, wantReason: ReasonWithinTolerance}}},
		{"zero tolerance is replaced by default, explicit tolerance 0.5 holds wider", with(func(p *Policy) { p.Tolerance = 0.5 }),
			[]step{{cur: 4, m: qd(14), want: 4, wantReason: ReasonWithinTolerance}, {at: time.Second, cur: 4, m: qd(16), want: 7}}},
		{"strategy max", two(StrategyMax), []step{{cur: 4, m: map[MetricType]float64{QueueDepth: 20, TokensInQueue: 500}, want: 8}}},
		{"strategy min", two(StrategyMin), []step{{cur: 4, m: map[MetricType]float64{QueueDepth: 20, TokensInQueue: 500}, want: 2}}},
		{"strategy average", two(StrategyAverage), []step{{cur: 4, m: map[MetricType]float64{QueueDepth: 20, TokensInQueue: 500}, want: 5}}},
		{"missing metric blocks scale-down", two(StrategyMax), []step{{cur: 4, m: qd(1), missing: []MetricType{TokensInQueue}, want: 4, wantReason: ReasonMissingMetrics}}},
		{"missing metric does not block scale-up", two(StrategyMax), []step{{cur: 4, m: qd(30), missing: []MetricType{TokensInQueue}, want: 12}}},
		{"all metrics missing holds", queuePolicy(), []step{{cur: 3, missing: []MetricType{QueueDepth}, want: 3, wantReason: ReasonNoMetrics}}},
		{"activation from zero uses totals", with(func(p *Policy) { p.MinReplicas = 0 }), []step{{cur: 0, m: qd(25), want: 3}}},
		{"stays at zero without load", with(func(p *Policy) { p.MinReplicas = 0 }), []step{{cur: 0, m: qd(0), want: 0}}},
		{"min bound", queuePolicy(), []step{{cur: 2, m: qd(0), want: 1, wantReason: ReasonMetrics}}},
		{"max bound", with(func(p *Policy) { p.MaxReplicas = 6 }), []step{{cur: 2, m: qd(100), want: 6}}},
		{"scale-down stabilization keeps the max of the window", with(func(p *Policy) { p.Behavior.ScaleDown.StabilizationWindow = 300 * time.Second }), []step{
			{at: 0, cur: 10, m: qd(10), want: 10},
			{at: 60 * time.Second, cur: 10, m: qd(4), want: 10, wantReason: ReasonStabilized},
			{at: 200 * time.Second, cur: 10, m: qd(6), want: 10, wantReason: ReasonStabilized},
			{at: 301 * time.Second, cur: 10, m: qd(4), want: 6, wantReason: ReasonStabilized},
			{at: 600 * time.Second, cur: 6, m: qd(6), want: 4, wantReason: ReasonMetrics}}},
		{"scale-up stabilization keeps the min of the window", with(func(p *Policy) { p.Behavior.ScaleUp.StabilizationWindow = 60 * time.Second }), []step{
			{at: 0, cur: 2, m: qd(10), want: 2},
			{at: 30 * time.Second, cur: 2, m: qd(40), want: 2, wantReason: ReasonStabilized},
			{at: 61 * time.Second, cur: 2, m: qd(40), want: 8}}},
		{"up policy Min of percent and absolute", with(func(p *Policy) {
			p.Behavior.ScaleUp = ScalingRules{MaxChangePercent: 100, MaxChangeAbsolute: 5, Period: time.Minute}
		}), []step{{cur: 4, m: qd(50), want: 8, wantReason: ReasonPolicyLimit}}},
		{"up policy Max of percent and absolute", with(func(p *Policy) {
			p.Behavior.ScaleUp = ScalingRules{MaxChangePercent: 100, MaxChangeAbsolute: 5, Period: time.Minute, Select: SelectMax}
		}), []step{{cur: 4, m: qd(50), want: 9, wantReason: ReasonPolicyLimit}}},
		{"up policy counts changes within the period", with(func(p *Policy) {
			p.Behavior.ScaleUp = ScalingRules{MaxChangePercent: 100, Period: time.Minute}
		}), []step{
			{at: 0, cur: 4, m: qd(50), want: 8},
			{at: 10 * time.Second, cur: 8, m: qd(50), want: 8, wantReason: ReasonPolicyLimit},
			{at: 61 * time.Second, cur: 8, m: qd(50), want: 16}}},
		{"down policy Min (most restrictive)", with(func(p *Policy) {
			p.Behavior.ScaleDown = ScalingRules{MaxChangePercent: 50, MaxChangeAbsolute: 2, Period: 2 * time.Minute}
		}), []step{{cur: 10, m: qd(1), want: 8, wantReason: ReasonPolicyLimit}}},
		{"down policy Max (most permissive)", with(func(p *Policy) {
			p.Behavior.ScaleDown = ScalingRules{MaxChangePercent: 50, MaxChangeAbsolute: 2, Period: 2 * time.Minute, Select: SelectMax}
		}), []step{{cur: 10, m: qd(1), want: 5, wantReason: ReasonPolicyLimit}}},
		// The HPA truncates periodStart*(1-percent/100): 10% of 9 still removes one
		// replica (floor(8.1) = 8), where a ceiling would never scale a pool of
		// fewer than 10 down.
		{"down percent is floored like the HPA", with(func(p *Policy) {
			p.Behavior.ScaleDown = ScalingRules{MaxChangePercent: 10, Period: time.Minute}
		}), []step{
			{at: 0, cur: 9, m: qd(1), want: 8, wantReason: ReasonPolicyLimit},
			{at: 30 * time.Second, cur: 8, m: qd(1), want: 8, wantReason: ReasonPolicyLimit},
			{at: 61 * time.Second, cur: 8, m: qd(1), want: 7, wantReason: ReasonPolicyLimit}}},
		{"down percent of 10 replicas is exact", with(func(p *Policy) {
			p.Behavior.ScaleDown = ScalingRules{MaxChangePercent: 10, Period: time.Minute}
		}), []step{{cur: 10, m: qd(1), want: 9, wantReason: ReasonPolicyLimit}}},
		{"down policy disabled", with(func(p *Policy) { p.Behavior.ScaleDown.Select = SelectDisabled }),
			[]step{{cur: 10, m: qd(1), want: 10, wantReason: ReasonPolicyLimit}}},
		{"cooldown between operations", with(func(p *Policy) { p.CooldownPeriod = 5 * time.Minute }), []step{
			{at: 0, cur: 2, m: qd(20), want: 4},
			{at: time.Minute, cur: 4, m: qd(20), want: 4, wantReason: ReasonCooldown},
			{at: 2 * time.Minute, cur: 4, m: qd(2), want: 4, wantReason: ReasonCooldown},
			{at: 5*time.Minute + time.Second, cur: 4, m: qd(20), want: 8}}},
		{"SLO implicit target with headroom", slo(func(*Policy) {}), []step{
			{cur: 4, m: map[MetricType]float64{TTFTP95: 0.4}, want: 4, wantReason: ReasonWithinTolerance}}},
		{"SLO breach without fast path is stabilized", slo(func(*Policy) {}), []step{
			{at: 0, cur: 2, m: map[MetricType]float64{TTFTP95: 0.4}, want: 2},
			{at: 10 * time.Second, cur: 2, m: map[MetricType]float64{TTFTP95: 1.2}, want: 2, wantReason: ReasonStabilized}}},
		{"SLO breach fast path skips stabilization, policies and cooldown", slo(func(p *Policy) {
			p.SLO.ScaleUpImmediately = true
		}), []step{
			{at: 0, cur: 2, m: map[MetricType]float64{TTFTP95: 0.4}, want: 2},
			{at: 10 * time.Second, cur: 2, m: map[MetricType]float64{TTFTP95: 1.2}, want: 6, wantReason: ReasonSLOBreach},
			{at: 20 * time.Second, cur: 6, m: map[MetricType]float64{TTFTP95: 0.8}, want: 12, wantReason: ReasonSLOBreach}}},
		{"SLO breachOnly: no proportional ttft metric, fast path on token metrics", slo(func(p *Policy) {
			p.SLO.ScaleUpImmediately, p.SLO.BreachOnly = true, true
		}), []step{
			{at: 0, cur: 2, m: map[MetricType]float64{QueueDepth: 10, TTFTP95: 0.3}, want: 2},
			{at: 10 * time.Second, cur: 2, m: map[MetricType]float64{QueueDepth: 10, TTFTP95: 1.2}, want: 2, wantReason: ReasonWithinTolerance},
			{at: 20 * time.Second, cur: 2, m: map[MetricType]float64{QueueDepth: 40, TTFTP95: 1.2}, want: 8, wantReason: ReasonSLOBreach}}},
		{"SLO fast path capped by maxScaleUp", slo(func(p *Policy) { p.SLO.ScaleUpImmediately, p.SLO.MaxScaleUp = true, 3 }), []step{
			{cur: 2, m: map[MetricType]float64{TTFTP95: 1.2}, want: 5, wantReason: ReasonSLOBreach}}},
		{"SLO above headroom target but below SLO is not a breach", slo(func(p *Policy) { p.SLO.ScaleUpImmediately = true }), []step{
			{at: 0, cur: 2, m: map[MetricType]float64{TTFTP95: 0.3}, want: 2},
			{at: time.Second, cur: 2, m: map[MetricType]float64{TTFTP95: 0.45}, want: 2, wantReason: ReasonStabilized}}},
		{"scale-down safety requires headroom for checkDuration", with(func(p *Policy) {
			p.SLO = SLOTarget{Enabled: true, TTFT: time.Second, RequireHeadroomPercent: 50, CheckDuration: 10 * time.Minute}
			p.Metrics[0].Target = 10
		}), []step{
			{at: 0, cur: 8, m: map[MetricType]float64{QueueDepth: 1, TTFTP95: 0.5}, want: 8, wantReason: ReasonScaleDownUnsafe},
			{at: 5 * time.Minute, cur: 8, m: map[MetricType]float64{QueueDepth: 1, TTFTP95: 0.6}, want: 8, wantReason: ReasonScaleDownUnsafe},
			{at: 11 * time.Minute, cur: 8, m: map[MetricType]float64{QueueDepth: 1, TTFTP95: 0.4}, want: 8, wantReason: ReasonScaleDownUnsafe},
			{at: 21*time.Minute + time.Second, cur: 8, m: map[MetricType]float64{QueueDepth: 1, TTFTP95: 0.4}, want: 4}}},
		{"maxCostPerHour caps serving plus warm", with(func(p *Policy) {
			p.Cost = CostConstraints{CostPerReplicaHour: 2, MaxCostPerHour: 10}
		}), []step{{cur: 2, warm: 1, m: qd(40), want: 4, wantReason: ReasonBudget}}},
		{"maxCostPerHour never forces a scale-down", with(func(p *Policy) {
			p.Cost = CostConstraints{CostPerReplicaHour: 2, MaxCostPerHour: 10}
		}), []step{{cur: 7, m: qd(10), want: 7}}},
		{"daily budget exceeded scales to min", with(func(p *Policy) {
			p.Cost = CostConstraints{CostPerReplicaHour: 2, DailyBudget: 100, OnBudgetExceeded: []BudgetAction{ActionScaleToMin}}
		}), []step{{cur: 5, m: qd(20), spent: 99, want: 10}, {cur: 10, m: qd(20), spent: 100, want: 1, wantReason: ReasonBudget}}},
		{"daily budget without an action holds", with(func(p *Policy) {
			p.Cost = CostConstraints{CostPerReplicaHour: 2, DailyBudget: 100}
		}), []step{{cur: 5, m: qd(10), spent: 150, want: 5}}},
		{"queue lag seed example: +2 replicas", with(func(p *Policy) {
			p.Metrics = nil
			p.Lag = QueueLag{Enabled: true, MaxLagThreshold: 100, PrefetchCount: 10, TargetThroughput: 5}
		}), []step{{cur: 5, lag: 150, want: 7, wantReason: ReasonQueueLag}}},
		{"queue lag below threshold shrinks to the prefetch need", with(func(p *Policy) {
			p.Metrics = nil
			p.Lag = QueueLag{Enabled: true, MaxLagThreshold: 100, PrefetchCount: 10}
		}), []step{{cur: 5, lag: 30, want: 3}, {at: time.Second, cur: 3, lag: 0, want: 1}}},
		{"queue lag combines with metrics by max", with(func(p *Policy) {
			p.Lag = QueueLag{Enabled: true, MaxLagThreshold: 10, PrefetchCount: 1}
		}), []step{{cur: 2, m: qd(10), lag: 6, want: 6, wantReason: ReasonQueueLag}}},
		{"override wins and is bounded", with(func(p *Policy) { p.MaxReplicas = 8; p.CooldownPeriod = time.Hour }), []step{
			{at: 0, cur: 2, m: qd(20), want: 4},
			{at: time.Second, cur: 4, override: &Override{Replicas: 12, Reason: "spike"}, want: 8, wantReason: ReasonBounds}}},
		{"cron floor: business hours then off-hours", with(func(p *Policy) {
			p.Predictive.Schedules = []Schedule{{Name: "business-hours", Cron: "0 8 * * 1-5", Replicas: 20}, {Name: "off-hours", Cron: "0 18 * * *", Replicas: 5}}
		}), []step{
			{at: 0, cur: 2, m: qd(0), want: 20, wantReason: ReasonSchedule},
			{at: 8*time.Hour + time.Minute, cur: 20, m: qd(0), want: 20, wantReason: ReasonSchedule},
			{at: 9*time.Hour + time.Minute, cur: 20, m: qd(0), want: 5, wantReason: ReasonSchedule},
			{at: 10 * time.Hour, cur: 5, m: qd(40), want: 20, wantReason: ReasonMetrics}}},
		{"cron floor holds on weekend after off-hours", with(func(p *Policy) {
			p.Predictive.Schedules = []Schedule{{Name: "business-hours", Cron: "0 8 * * 1-5", Replicas: 20}, {Name: "off-hours", Cron: "0 18 * * *", Replicas: 5}}
		}), []step{{at: -48*time.Hour - 30*time.Minute, cur: 1, m: qd(0), want: 5, wantReason: ReasonSchedule}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { run(t, tc.p, tc.steps) })
	}
}

func TestDecideWarmSplitAndMessage(t *testing.T) {
	d := run(t, queuePolicy(), []step{{cur: 2, warm: 3, m: qd(30), want: 6}})[0]
	if d.FromWarm != 3 || d.Cold != 1 {
		t.Fatalf("warm split: got fromWarm=%d cold=%d, want 3 and 1", d.FromWarm, d.Cold)
	}
	if !strings.Contains(d.Message, "2 -> 6") || d.Ratios[QueueDepth] != 3 {
		t.Fatalf("message/ratios: %q %v", d.Message, d.Ratios)
	}
}

func TestUnapply(t *testing.T) {
	p := queuePolicy()
	p.CooldownPeriod = time.Minute
	p.Behavior.ScaleUp = ScalingRules{MaxChangeAbsolute: 2, Period: 30 * time.Second}
	a, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	in := func(at time.Duration, cur int32) Input {
		return Input{Now: t0.Add(at), CurrentReplicas: cur, Metrics: map[MetricType]MetricValue{QueueDepth: {Value: 50, Valid: true}}}
	}
	d := a.Decide(in(0, 2))
	if d.Desired != 4 {
		t.Fatalf("first decision %d, want 4", d.Desired)
	}
	a.Unapply(d) // the write failed: the pool is still at 2
	if d = a.Decide(in(5*time.Second, 2)); d.Desired != 4 || d.Reason == ReasonCooldown {
		t.Fatalf("after a failed write: %d (%s), want 4 without cooldown", d.Desired, d.Reason)
	}
	// Applied this time: it counts against the policy (2 per 30 s) and the cooldown.
	if d = a.Decide(in(10*time.Second, 4)); d.Desired != 4 || d.Reason != ReasonPolicyLimit {
		t.Fatalf("after an applied change: %d (%s), want 4 (PolicyLimit)", d.Desired, d.Reason)
	}
	if d = a.Decide(in(50*time.Second, 4)); d.Desired != 4 || d.Reason != ReasonCooldown {
		t.Fatalf("within the cooldown of the applied change: %d (%s), want 4 (Cooldown)", d.Desired, d.Reason)
	}
}

func TestValidate(t *testing.T) {
	ok := queuePolicy()
	tests := []struct {
		name  string
		mut   func(*Policy)
		field string
	}{
		{"negative min", func(p *Policy) { p.MinReplicas = -1 }, "minReplicas"},
		{"max below min", func(p *Policy) { p.MaxReplicas = 0 }, "maxReplicas"},
		{"zero target", func(p *Policy) { p.Metrics[0].Target = 0 }, "metrics[0].target"},
		{"unknown metric", func(p *Policy) { p.Metrics[0].Type = "cpu" }, "metrics[0].type"},
		{"strategy", func(p *Policy) { p.Strategy = "median" }, "strategy"},
		{"tolerance", func(p *Policy) { p.Tolerance = 1 }, "tolerance"},
		{"select", func(p *Policy) { p.Behavior.ScaleUp.Select = "Any" }, "behavior.scaleUp.select"},
		{"slo ttft", func(p *Policy) { p.SLO.Enabled = true }, "sloTarget.ttft"},
		{"confidence", func(p *Policy) { p.Predictive.MinConfidence = 2 }, "predictive.minConfidence"},
		{"horizon", func(p *Policy) { p.Predictive.Enabled = true }, "predictive.horizonMinutes"},
		{"negative budget", func(p *Policy) { p.Cost.DailyBudget = -1 }, "costConstraints"},
		{"budget action", func(p *Policy) {
			p.Cost = CostConstraints{CostPerReplicaHour: 1, OnBudgetExceeded: []BudgetAction{"pray"}}
		}, "onBudgetExceeded[0]"},
		{"prefetch", func(p *Policy) { p.Lag.Enabled = true }, "prefetchCount"},
		{"cron", func(p *Policy) { p.Predictive.Schedules = []Schedule{{Cron: "bad"}} }, "schedules[0].cron"},
	}
	if _, err := New(ok); err != nil {
		t.Fatalf("valid policy rejected: %v", err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := queuePolicy()
			tc.mut(&p)
			_, err := New(p)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("got %v, want an error naming %q", err, tc.field)
			}
		})
	}
}

func TestCostMeter(t *testing.T) {
	m := CostMeter{CostPerReplicaHour: 2}
	start := time.Date(2026, 11, 29, 22, 0, 0, 0, time.UTC)
	steps := []struct {
		at       time.Duration
		replicas int32
		want     float64
	}{
		{0, 3, 0},
		{time.Hour, 5, 6},                       // 3 replicas for 1h at 2/h
		{90 * time.Minute, 5, 6 + 5},            // +5 replicas for 0.5h
		{150 * time.Minute, 1, 5 * 0.5 * 2},     // crossed midnight: only 00:00-00:30 counts
		{150*time.Minute + time.Hour, 1, 5 + 2}, // +1 replica for 1h
	}
	for i, s := range steps {
		if got := m.Observe(start.Add(s.at), s.replicas); got < s.want-1e-9 || got > s.want+1e-9 {
			t.Fatalf("step %d: spent %v, want %v", i, got, s.want)
		}
	}
}

// TestCostMeterRate: rates from the node price model are charged as given, across a restore.
func TestCostMeterRate(t *testing.T) {
	m := CostMeter{CostPerReplicaHour: 100} // not used by ObserveRate
	start := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	m.ObserveRate(start, 7.5)
	if got := m.ObserveRate(start.Add(2*time.Hour), 1); got != 15 {
		t.Fatalf("spent %v, want 15 (2h at $7.5/h)", got)
	}
	var r CostMeter
	r.Restore(m.Snapshot())
	if got := r.ObserveRate(start.Add(3*time.Hour), 0); got != 16 {
		t.Fatalf("restored meter spent %v, want 16 (1h more at $1/h)", got)
	}
	if r.Day() != "2026-11-29" {
		t.Fatalf("day %q", r.Day())
	}
}

func TestCostCapUsesNodePrice(t *testing.T) {
	c := CostConstraints{CostPerReplicaHour: 10, MaxCostPerHour: 100}
	for _, tc := range []struct {
		price float64
		warm  int32
		want  int32
	}{{0, 0, 10}, {4, 0, 25}, {4, 5, 20}, {200, 0, 0}} {
		if got, ok := costCap(c, tc.warm, tc.price); !ok || got != tc.want {
			t.Errorf("price %v warm %d: cap %d, want %d", tc.price, tc.warm, got, tc.want)
		}
	}
}
