package scalesim

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

func TestExplainSplitsTheExcessByRule(t *testing.T) {
	m := Model{PrefillTPS: 2000, DecodeTPS: 30, Slots: 16, ColdStart: time.Minute, WarmActivation: 5 * time.Second,
		Step: 100 * time.Millisecond, Warmup: 5 * time.Minute, SLO: 6 * time.Second}
	tr, err := Synthetic("burst", 1, 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ref := RunCausal(tr, m, Need(tr, m, causalBinW), 600, 1.27, 64)
	var buf bytes.Buffer
	by := Explain(&buf, tr, m, Config{MaxReplicas: 64}, ref, 2, 60)
	nn := Run(tr, m, NeuroNetes(m, Config{MaxReplicas: 64}), 2)
	// The excess by rule adds up to NeuroNetes' replica-seconds over the
	// reference's within a 10 s sample per policy.
	sum := 0.0
	for _, v := range by {
		sum += v
	}
	want := nn.ReplicaSeconds - ref.ReplicaSeconds
	if math.Abs(sum-want) > 0.05*math.Abs(want)+10*64 {
		t.Errorf("excess by rule %v sums to %.0f, want about %.0f", by, sum, want)
	}
	t.Logf("excess by rule %v, sum %.0f, replica-s %.0f - %.0f", by, sum, nn.ReplicaSeconds, ref.ReplicaSeconds)
	if by[RuleHeadroom] == 0 {
		t.Errorf("no excess held by the headroom x peak: %v", by)
	}
	out := buf.String()
	for _, s := range []string{"  t   360 s ", "headroom x peak", "replica-s above the reference"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}

// A request whose own prefill takes most of the SLO misses it behind any
// queue: Run lists it with its prefill, and Explain says how little wait the
// SLO left it.
func TestExplainListsMissedRequestsByTheirPrefill(t *testing.T) {
	m := Model{PrefillTPS: 1000, DecodeTPS: 30, Slots: 16, ColdStart: time.Minute, WarmActivation: 5 * time.Second,
		Step: 100 * time.Millisecond, SLO: 10 * time.Second}
	// One replica: a 5 s prompt, then a 9.5 s one 1 s later (it waits 4 s:
	// TTFT 13.5 s), then short ones that wait too little to miss.
	tr := Trace{Name: "long-behind-short", Requests: []Request{{Arrival: 0, In: 5000, Out: 2}, {Arrival: 1, In: 9500, Out: 2}}}
	for i := range 10 {
		tr.Requests = append(tr.Requests, Request{Arrival: 20 + float64(i), In: 200, Out: 2})
	}
	r := Run(tr, m, &fixed{n: 1}, 1)
	if len(r.Missed) != 1 {
		t.Fatalf("missed %+v (within SLO %d of %d), want the 9.5 s prompt alone", r.Missed, r.WithinSLO, r.Requests)
	}
	if x := r.Missed[0]; x.Arrival != 1 || math.Abs(x.Prefill-9.5) > 1e-9 || math.Abs(x.TTFT-13.5) > 0.11 {
		t.Errorf("missed %+v, want arrival 1 s, prefill 9.5 s, TTFT 13.5 s", x)
	}
	var buf bytes.Buffer
	writeMissed(&buf, tr.Name, r, m.SLO)
	want := "1 missed requests, 1 with a first token, 0 without; their own prefill 9.5-9.5 s (95-95% of the SLO: the wait they could afford 0.5-0.5 s): arrival 1 s TTFT 13.5 s prefill 9.5 s"
	if !strings.Contains(buf.String(), want) {
		t.Errorf("output %q lacks %q", buf.String(), want)
	}
}
