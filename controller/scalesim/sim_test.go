package scalesim

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadTrace(t *testing.T) {
	tests := []struct {
		name, file, body string
		max              time.Duration
		want             []Request
		wantErr          string
	}{
		{"azure csv", "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:05.4799600,100,2",
			0, []Request{{0, 4808, 10}, {1.5, 100, 2}}, ""},
		{"mooncake jsonl", "m.jsonl", `{"timestamp": 1000, "input_length": 6758, "output_length": 500, "hash_ids": [0]}` + "\n" +
			`{"timestamp": 3500, "input_length": 10, "output_length": 1, "hash_ids": []}` + "\n", 0, []Request{{0, 6758, 500}, {2.5, 10, 1}}, ""},
		{"max duration", "m.jsonl", `{"timestamp": 0, "input_length": 1, "output_length": 1}` + "\n" + `{"timestamp": 5000, "input_length": 1, "output_length": 1}` + "\n",
			time.Second, []Request{{0, 1, 1}}, ""},
		{"bad header", "b.csv", "a,b,c\n1,2,3", 0, nil, "header"},
		{"bad tokens", "b.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,x,1", 0, nil, "line 2: token counts"},
		{"bad json", "b.jsonl", "{", 0, nil, "line 1"},
		{"unknown ext", "b.txt", "", 0, nil, "unknown trace format"},
		{"empty", "e.jsonl", "", 0, nil, "no requests"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := LoadTrace(writeFile(t, tc.file, tc.body), tc.max)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(tr.Requests) != len(tc.want) {
				t.Fatalf("got %v, want %v", tr.Requests, tc.want)
			}
			for i := range tc.want {
				if d := tr.Requests[i].Arrival - tc.want[i].Arrival; d > 1e-6 || d < -1e-6 || tr.Requests[i].In != tc.want[i].In || tr.Requests[i].Out != tc.want[i].Out {
					t.Fatalf("request %d: got %+v, want %+v", i, tr.Requests[i], tc.want[i])
				}
			}
		})
	}
}

// fixed keeps a constant target, or switches to After at time At.
type fixed struct {
	n, after int
	at       float64
	warm     int
}

func (f *fixed) Name() string            { return "fixed" }
func (f *fixed) Interval() time.Duration { return time.Second }
func (f *fixed) Decide(v View) int {
	if f.at > 0 && v.Now() >= f.at {
		return f.after
	}
	return f.n
}
func (f *fixed) WarmPool() (int, time.Duration, int) { return f.warm, 0, 1 }

var testModel = Model{PrefillTPS: 1000, DecodeTPS: 10, Slots: 4, ColdStart: 30 * time.Second, WarmActivation: 2 * time.Second, SLO: time.Second}

// steady is one 500-token request every 0.5 s for d seconds: 1000 prompt tok/s.
func steady(d int) Trace {
	var rs []Request
	for i := 0; i < 2*d; i++ {
		rs = append(rs, Request{Arrival: float64(i) / 2, In: 500, Out: 5})
	}
	return Trace{Name: "steady", Requests: rs}
}

func TestRunCapacityAndCost(t *testing.T) {
	tr := steady(120)
	tests := []struct {
		name          string
		p             *fixed
		minAtt, maxAt float64
		cost          float64 // expected replica-seconds (±2%)
	}{
		{"ample capacity meets the SLO", &fixed{n: 3}, 1, 1, 3 * tr.Duration()},
		{"half capacity misses", &fixed{n: 1, after: 1, at: 0}, 0, 0.5, 1 * tr.Duration()},
		{"warm replica counts as cost", &fixed{n: 3, warm: 1}, 1, 1, 4 * tr.Duration()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// 1 replica at exactly 100% prefill utilization plus decode slots: overload.
			m := testModel
			if tc.p.n == 1 {
				m.PrefillTPS = 800
			}
			r := Run(tr, m, tc.p, tc.p.n)
			if a := r.Attainment(); a < tc.minAtt || a > tc.maxAt {
				t.Fatalf("attainment %.3f not in [%.2f,%.2f]", a, tc.minAtt, tc.maxAt)
			}
			if r.ReplicaSeconds < tc.cost*0.98 || r.ReplicaSeconds > tc.cost*1.02 {
				t.Fatalf("replica-seconds %.1f, want ~%.1f", r.ReplicaSeconds, tc.cost)
			}
		})
	}
}

func TestRunWarmActivationBeatsColdStart(t *testing.T) {
	tr := steady(200)
	m := testModel
	m.PrefillTPS = 600 // 1000 tok/s offered: needs 2 replicas
	cold := Run(tr, m, &fixed{n: 1, after: 2, at: 20}, 1)
	warm := Run(tr, m, &fixed{n: 1, after: 2, at: 20, warm: 1}, 1)
	if warm.Attainment() <= cold.Attainment() {
		t.Fatalf("warm activation attainment %.3f not above cold start %.3f", warm.Attainment(), cold.Attainment())
	}
	if warm.ScaleOps != 1 || cold.ScaleOps != 1 {
		t.Fatalf("scale ops warm=%d cold=%d, want 1", warm.ScaleOps, cold.ScaleOps)
	}
}

func TestFlaps(t *testing.T) {
	tests := []struct {
		name string
		cs   []change
		want int
	}{
		{"monotonic", []change{{0, 1, 2}, {10, 2, 3}}, 0},
		{"quick reversal", []change{{0, 1, 3}, {100, 3, 2}, {200, 2, 4}}, 2},
		{"slow reversal", []change{{0, 1, 3}, {400, 3, 2}}, 0},
	}
	for _, tc := range tests {
		if got := flaps(tc.cs); got != tc.want {
			t.Errorf("%s: %d flaps, want %d", tc.name, got, tc.want)
		}
	}
}

func TestOracleMeetsTarget(t *testing.T) {
	var rs []Request
	for i := range 600 { // a burst every 60 s on a steady base
		rs = append(rs, Request{Arrival: float64(i) / 2, In: 300, Out: 3})
		if i%120 == 0 {
			for range 10 {
				rs = append(rs, Request{Arrival: float64(i) / 2, In: 800, Out: 3})
			}
		}
	}
	o, curve := BestOracle(Trace{Name: "burst", Requests: rs}, testModel, 0.99, 32)
	if o.Attainment() < 0.99 {
		t.Fatalf("oracle attainment %.3f < 0.99", o.Attainment())
	}
	if len(curve) == 0 || o.ReplicaSeconds <= 0 {
		t.Fatalf("empty oracle: %+v", o)
	}
}

func TestPoliciesReactToLoad(t *testing.T) {
	// Load steps from 400 to 4000 prompt tok/s at t=120 s and back at t=420 s.
	var rs []Request
	for i := 0; i < 3600; i++ { // 30 min: longer than the adaptive policy's initial 20-min memory
		ts := float64(i) / 2
		rs = append(rs, Request{Arrival: ts, In: 200, Out: 20})
		if ts >= 120 && ts < 420 {
			for range 9 {
				rs = append(rs, Request{Arrival: ts, In: 200, Out: 20})
			}
		}
	}
	tr := Trace{Name: "step", Requests: rs}
	m := testModel
	for _, p := range All(m, Config{MaxReplicas: 20, TargetUtilization: 0.7, PrewarmPercent: 5}) {
		t.Run(p.Name(), func(t *testing.T) {
			r := Run(tr, m, p, 1)
			peak, last := 0.0, r.Series[len(r.Series)-1].Serving
			for _, pt := range r.Series {
				peak = max(peak, pt.Serving)
			}
			if peak < 3 {
				t.Fatalf("%s never scaled up: peak %v serving", p.Name(), peak)
			}
			if last >= peak {
				t.Fatalf("%s never scaled down: last %v, peak %v", p.Name(), last, peak)
			}
		})
	}
}

func TestWritePNGAndOutcome(t *testing.T) {
	tr := steady(120)
	r := Run(tr, testModel, &fixed{n: 2}, 2)
	o, ref := r, r
	o.Policy, ref.Policy = "oracle", "causal-ref"
	r.Policy = "neuronetes"
	keda := r
	keda.Policy = "keda"
	out := Outcome{Trace: "steady", SLO: testModel.SLO, Oracle: o, Causal: CausalRef{Result: ref, Met: true}, Results: []Result{r, keda}}
	p := filepath.Join(t.TempDir(), "x.png")
	if err := WritePNG(p, "t", out, 0.99); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 800 {
		t.Fatalf("plot of %v is too small to read", b)
	}
	var sb strings.Builder
	WriteOutcome(&sb, out, 0.99)
	for _, want := range []string{"neuronetes", "causal-ref", "x hindsight ref", "x impl ref", "trace verdict steady"} {
		if !strings.Contains(sb.String(), want) {
			t.Fatalf("table without %q: %s", want, sb.String())
		}
	}
}

func TestRollingAttainment(t *testing.T) {
	var ps []Point
	for i := range 60 { // 10 minutes, one miss in ten from minute 5 on
		p := Point{T: float64(10 * (i + 1)), Served: 10}
		if i >= 30 {
			p.Misses = 1
		}
		ps = append(ps, p)
	}
	xy := rollingAttainment(ps)
	if xy[29].Y != 100 || xy[len(xy)-1].Y != 90 {
		t.Fatalf("attainment %.1f at 5 min, %.1f at 10 min; want 100 and 90", xy[29].Y, xy[len(xy)-1].Y)
	}
}

func TestCausalCurveSeesOnlyThePast(t *testing.T) {
	need := make([]float64, 100)
	need[50] = 4 // one bin [50,60) of need 4
	for i := 51; i < 60; i++ {
		need[i] = 4
	}
	tests := []struct {
		name string
		t    int
		want int
	}{
		{"before the bin", 49, 1},
		{"during the bin, not ended", 55, 1},
		{"right after the bin", 60, 8},
		{"within the lookback", 85, 8},
		{"past the lookback", 95, 1},
	}
	curve := CausalCurve(need, 10, 2, 30, 64)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := curve[tc.t]; got != tc.want {
				t.Fatalf("curve[%d] = %d, want %d", tc.t, got, tc.want)
			}
		})
	}
}

func TestBestCausalCostsMoreThanOracleOnBursts(t *testing.T) {
	var rs []Request
	for i := range 1200 { // a steady base and a burst every 120 s
		rs = append(rs, Request{Arrival: float64(i) / 2, In: 300, Out: 3})
		if i%240 == 100 {
			for range 10 {
				rs = append(rs, Request{Arrival: float64(i) / 2, In: 800, Out: 3})
			}
		}
	}
	tr := Trace{Name: "burst", Requests: rs}
	m := testModel
	o, _ := BestOracle(tr, m, 0.99, 32)
	c := BestCausal(tr, m, 0.99, 32, []int{70, 300})
	if !c.Met || c.Result.Attainment() < 0.99 {
		t.Fatalf("causal reference missed the target: %+v (attainment %.3f)", c.Lookback, c.Result.Attainment())
	}
	if c.Result.ReplicaSeconds <= o.ReplicaSeconds {
		t.Fatalf("causal reference %.0f replica-s is not above the oracle's %.0f on periodic bursts", c.Result.ReplicaSeconds, o.ReplicaSeconds)
	}
}
