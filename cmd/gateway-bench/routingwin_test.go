package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

// TestJudge is the routing targets' decision table.
func TestJudge(t *testing.T) {
	cases := []struct {
		name                           string
		gw, least, oracle, gwHit, oHit float64
		errors                         int
		wantGap                        float64
		ok                             bool
	}{
		{"at the oracle", 100, 200, 100, 0.8, 0.8, 0, 1, true},
		{"within 15% and a quarter of the gap", 114, 200, 100, 0.8, 0.8, 0, 0.86, true},
		{"over 1.15x the oracle", 116, 200, 100, 0.8, 0.8, 0, 0.84, false},
		{"hit rate under 0.95x", 110, 200, 100, 0.75, 0.8, 0, 0.9, false},
		{"closes too little of a small gap", 110, 112, 100, 0.8, 0.8, 0, 2.0 / 12, false},
		{"least-request at the oracle, gateway too", 100, 100, 100, 0.8, 0.8, 0, 1, true},
		{"failed requests", 100, 200, 100, 0.8, 0.8, 1, 1, false},
	}
	for _, c := range cases {
		j := judge(c.gw, c.least, c.oracle, c.gwHit, c.oHit, c.errors)
		if j.ok != c.ok || math.Abs(j.gapClosed-c.wantGap) > 1e-9 {
			t.Errorf("%s: %+v, want ok %v gap %v", c.name, j, c.ok, c.wantGap)
		}
	}
}

// TestSummarizeVerdict checks that one missed window fails the verdict and is named.
func TestSummarizeVerdict(t *testing.T) {
	st := func(ms float64, hit float64) *routingStats {
		return &routingStats{modelTTFTs: []float64{ms}, modelHitRate: hit}
	}
	good := &windowResult{start: 0, label: "+0s", requests: 1, gateway: st(105, 0.8), least: st(200, 0.7), oracle: st(100, 0.8)}
	bad := &windowResult{start: 20 * time.Minute, label: "+20m0s", requests: 1, gateway: st(150, 0.8), least: st(200, 0.7), oracle: st(100, 0.8)}
	var b bytes.Buffer
	if v := summarize(&b, []*windowResult{good}); !v.ok {
		t.Fatalf("a met window failed: %s", v.text)
	}
	v := summarize(&b, []*windowResult{good, bad})
	if v.ok || !strings.Contains(v.text, "MISSED") || !strings.Contains(v.text, "+20m0s: 1.500x") {
		t.Fatalf("verdict %q", v.text)
	}
}

// TestDecisionRegret: sending a follow-up away from the pod that caches its prefix is counted
// as a worse decision with the cache elsewhere; the oracle's own choices have none.
func TestDecisionRegret(t *testing.T) {
	rows := []traceRow{
		{Timestamp: 0, InputLength: 1024, OutputLength: 8, HashIDs: []uint64{0, 1}},
		{Timestamp: 5000, InputLength: 1536, OutputLength: 8, HashIDs: []uint64{0, 1, 2}},
	}
	reqs := prepare(replay(rows, 1, 8), 16)
	f := agentFlags{slots: 4, prefillRate: 1000, decodeRate: 100, kvTokens: 1 << 16, blockSize: 16}
	if g := decisionRegret(reqs, []int{0, 0}, 2, f, nil, time.Time{}); g.worse != 0 || g.n != 2 {
		t.Errorf("following the cache: %+v", g)
	}
	if g := decisionRegret(reqs, []int{0, 1}, 2, f, nil, time.Time{}); g.worse != 1 || g.cache != 1 {
		t.Errorf("leaving the cache: %+v", g)
	}
}

func TestDurationsFlag(t *testing.T) {
	var d durations
	if err := d.Set("20m, 40m"); err != nil || len(d) != 2 || d[1] != 40*time.Minute || d.String() != "20m0s,40m0s" {
		t.Fatalf("%v %v", d, err)
	}
	if err := d.Set("-1m"); err == nil {
		t.Fatal("a negative start accepted")
	}
}
