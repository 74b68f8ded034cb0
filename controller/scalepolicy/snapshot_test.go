package scalepolicy

import (
	"encoding/json"
	"math"
	"testing"
	"time"
)

// TestSnapshotRestoreResumes: an Autoscaler restored from a JSON round trip of another's snapshot
// decides exactly as the original from then on (stabilization, change limits, cooldown, the SLO
// safety clock and the forecaster all carry over), while a fresh one does not.
func TestSnapshotRestoreResumes(t *testing.T) {
	p := Policy{MinReplicas: 1, MaxReplicas: 40, Metrics: []MetricSpec{{Type: QueueDepth, Target: 10}},
		Behavior: Behavior{
			ScaleUp:   ScalingRules{MaxChangeAbsolute: 4, Period: time.Minute},
			ScaleDown: ScalingRules{StabilizationWindow: 5 * time.Minute, MaxChangePercent: 50, Period: 2 * time.Minute}},
		CooldownPeriod: 30 * time.Second,
		SLO:            SLOTarget{Enabled: true, TTFT: time.Second, RequireHeadroomPercent: 20, CheckDuration: time.Minute, BreachOnly: true},
		Predictive:     Predictive{Enabled: true, Horizon: 2 * time.Minute, Season: 10 * time.Minute, LookbackWindow: time.Hour}}
	orig, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	input := func(i int, cur int32) Input {
		// A wave of demand with a 10-minute period, so the forecaster has a season to learn.
		demand := 60 + 50*math.Sin(2*math.Pi*float64(i)/40)
		return Input{Now: t0.Add(time.Duration(i) * 15 * time.Second), CurrentReplicas: cur, QueueLag: -1,
			Metrics: map[MetricType]MetricValue{QueueDepth: {Value: demand / float64(cur), Valid: true}, TTFTP95: {Value: 0.3, Valid: true}}}
	}
	cur := int32(5)
	for i := range 120 {
		cur = orig.Decide(input(i, cur)).Desired
	}
	raw, err := json.Marshal(orig.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	var st State
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	if st.Forecast == nil || len(st.Forecast.Buckets) == 0 || len(st.Recs) == 0 || len(st.Events) == 0 {
		t.Fatalf("snapshot lacks history: %d recs, %d events, forecast %v", len(st.Recs), len(st.Events), st.Forecast != nil)
	}
	restored, _ := New(p)
	restored.Restore(st)
	fresh, _ := New(p)
	curO, curR, curF, differ := cur, cur, cur, 0
	for i := 120; i < 200; i++ {
		dO, dR, dF := orig.Decide(input(i, curO)), restored.Decide(input(i, curR)), fresh.Decide(input(i, curF))
		if dO.Desired != dR.Desired || dO.Reason != dR.Reason {
			t.Fatalf("step %d: restored decided %d (%s), the original %d (%s)", i, dR.Desired, dR.Reason, dO.Desired, dO.Reason)
		}
		if dF.Desired != dO.Desired {
			differ++
		}
		curO, curR, curF = dO.Desired, dR.Desired, dF.Desired
	}
	if differ == 0 {
		t.Fatal("a fresh Autoscaler decided like the original: the scenario does not exercise the history")
	}
	// A forecast of another bucket width is ignored rather than misread.
	p2 := p
	p2.Predictive.Horizon = 8 * time.Minute
	other, _ := New(p2)
	other.Restore(st)
	if len(other.forecast.buckets) != 0 {
		t.Fatal("a forecast of another step was restored")
	}
}

// TestCostMeterRestore: a meter restored from a snapshot charges the downtime at the count it
// last saw, so a restart cannot reset the day's spend.
func TestCostMeterRestore(t *testing.T) {
	m := CostMeter{CostPerReplicaHour: 2}
	m.Observe(t0, 3)
	m.Observe(t0.Add(time.Hour), 3) // 6 $
	var st MeterState
	raw, _ := json.Marshal(m.Snapshot())
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	r := CostMeter{CostPerReplicaHour: 2}
	r.Restore(st)
	if got := r.Observe(t0.Add(2*time.Hour), 3); math.Abs(got-12) > 1e-9 {
		t.Fatalf("restored meter spent %v after another hour at 3 replicas, want 12", got)
	}
}
