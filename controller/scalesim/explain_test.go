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
