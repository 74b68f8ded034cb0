package scalesim

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestImplementableRefLeavesTheTraceOut(t *testing.T) {
	m := Model{PrefillTPS: 2000, DecodeTPS: 30, Slots: 16, ColdStart: 60 * time.Second, WarmActivation: 5 * time.Second,
		SLO: 6 * time.Second, Step: 200 * time.Millisecond, Warmup: time.Minute}
	var ts []*Tuning
	for _, kind := range []string{"dip", "ramp", "burst"} {
		tr, err := Synthetic(kind, 1, 12*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, NewTuning(tr, m, 0.99, 64, []int{70, 300}))
	}
	held := ts[0].Trace
	ref := ImplementableRef(held, m, ts, 64)
	if !ref.Found {
		t.Fatalf("no setting found: %s", ref)
	}
	if slices.Contains(ref.TunedOn, held.Name) || len(ref.TunedOn) != 2 {
		t.Fatalf("tuned on %v: the scored trace %s must be left out", ref.TunedOn, held.Name)
	}
	// The alpha is the largest of the other traces' own smallest alphas at
	// the chosen lookback, so each of them keeps the target.
	i := slices.Index(ts[1].Sweep.Lookbacks, ref.Lookback)
	if want := math.Max(ts[1].Sweep.Refs[i].Alpha, ts[2].Sweep.Refs[i].Alpha); ref.Alpha != want {
		t.Fatalf("alpha %.3f at %d s, want %.3f", ref.Alpha, ref.Lookback, want)
	}
	for _, tu := range ts[1:] {
		if r := tu.run(ref.Lookback, ref.Alpha, 64); r.Attainment() < 0.99 {
			t.Fatalf("%s at the chosen setting: %.2f%% < 99%%", tu.Trace.Name, 100*r.Attainment())
		}
	}
	if ref.Result.Policy != "impl-ref" || ref.Result.Requests == 0 {
		t.Fatalf("held-out run %+v", ref.Result)
	}
}
