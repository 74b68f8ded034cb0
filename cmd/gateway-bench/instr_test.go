package main

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// A callgrind dump as valgrind writes it: compressed names, a call's inclusive cost after its
// calls= line (not a self cost), relative positions.
const cgDump = `version: 1
creator: callgrind-3.19.0
positions: line
events: Ir
summary: 1115
fl=(1) /src/a.go
fn=(1) main.relay
10 100
+2 50
cfl=(1)
cfn=(2) runtime.netpoll
calls=3 20
12 900
fn=(2)
20 700
fn=(3) main.scan
-5 10
* 250
fn=(4) main.scan'2
+1 5

totals: 1115
`

func TestParseCallgrind(t *testing.T) {
	c, err := parseCallgrind(strings.NewReader(cgDump))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"main.relay": 150, "runtime.netpoll": 700, "main.scan": 265}
	if c.total != 1115 || len(c.fns) != len(want) {
		t.Fatalf("total %d, functions %v", c.total, c.fns)
	}
	for f, v := range want {
		if c.fns[f] != v {
			t.Errorf("%s: %d, want %d", f, c.fns[f], v)
		}
	}
}

func TestPerChunkAndDiff(t *testing.T) {
	short := instrCount{total: 1000, fns: map[string]int64{"a": 600, "b": 400}}
	long := instrCount{total: 3000, fns: map[string]int64{"a": 1600, "b": 1200, "c": 200}}
	total, fns := perChunk(short, long, 100)
	if total != 20 || fns["a"] != 10 || fns["b"] != 8 || fns["c"] != 2 {
		t.Fatalf("per chunk %v %v", total, fns)
	}
	r := instrRun{gw: 20, rp: 25, gwFns: fns, rpFns: map[string]float64{"a": 4, "b": 8, "d": 13}}
	rows := instrDiff(r, 3)
	got := []string{}
	for _, row := range rows {
		got = append(got, row.fn)
	}
	// a: +6, d: -13 shown, largest excess first; b (0) and c (+2) in the rest row.
	if len(rows) != 3 || rows[0].fn != "a" || rows[1].fn != "d" || rows[2].gw != 10 || rows[2].rp != 8 {
		t.Fatalf("rows %v %+v", got, rows)
	}
	r = instrRun{gw: 100, rp: 90, gwFns: map[string]float64{"a": 40}, rpFns: map[string]float64{"a": 10, "d": 20}}
	if why := instrWhy(r); !strings.Contains(why, "+10 instructions") || !strings.Contains(why, "a +30") || strings.Contains(why, "d ") {
		t.Fatalf("instrWhy: %s", why)
	}
}

// The CPU target is judged on the instruction ratio when it was counted, on process CPU time
// otherwise.
func TestJudgeOverheadInstructions(t *testing.T) {
	st := func(cpu float64) *overheadStats {
		return &overheadStats{ttfts: []float64{10, 10, 10}, chunks: 100, elapsed: 1, roundCPU: []float64{cpu}}
	}
	stats := []*overheadStats{st(0), st(5), st(10), st(12)}
	pair := []*overheadStats{st(10), st(12)} // 1.2x in process CPU time
	cases := []struct {
		instr  float64
		ok     bool
		judged bool
	}{
		{math.NaN(), false, false},
		{0.95, true, true},
		{1.01, false, true},
	}
	for _, c := range cases {
		v := judgeOverhead(stats, pair, 5, c.instr)
		if v.ok != c.ok || v.instrJudged != c.judged {
			t.Errorf("instr %v: ok %v judged %v, want %v %v", c.instr, v.ok, v.instrJudged, c.ok, c.judged)
		}
	}
}

// The cost per request leaves out the chunks (at the per-chunk cost) and the idle phase's
// timer-driven work: a variant that forgets either gets other numbers.
func TestPerRequest(t *testing.T) {
	idle := instrCount{total: 100, fns: map[string]int64{"sysmon": 100}}
	short := instrCount{total: 1300, fns: map[string]int64{"sysmon": 100, "relay": 400, "parse": 800}}
	total, fns := perRequest(idle, short, 2, map[string]float64{"relay": 2}, 200, 4)
	if total != 200 || fns["parse"] != 200 || fns["relay"] != 0 || fns["sysmon"] != 0 {
		t.Fatalf("per request %v %v, want 200 with parse 200, relay 0, sysmon 0", total, fns)
	}
}

// The TTFT p50 part of the verdict prints ReverseProxy's added p50 beside the gateway's, and
// says so when ReverseProxy itself misses the relay + 2 ms target.
func TestTTFTTextFloor(t *testing.T) {
	st := func(ttft float64) *overheadStats {
		return &overheadStats{ttfts: []float64{ttft}, chunks: 100, elapsed: 1, roundCPU: []float64{10}}
	}
	cases := []struct {
		rp          float64
		floorMissed bool
	}{{15, true}, {12, false}}
	for _, c := range cases {
		// direct 10 ms, relay 11 (+1), ReverseProxy c.rp, gateway 20 (+10)
		v := judgeOverhead([]*overheadStats{st(10), st(11), st(c.rp), st(20)}, []*overheadStats{st(10), st(10)}, 5, 0.9)
		text := v.ttftText()
		if want := fmt.Sprintf("ReverseProxy adds %+.2f", c.rp-10); !strings.Contains(text, want) || !strings.Contains(text, "adds +10.00 ms") {
			t.Errorf("rp %v: %q lacks %q or the gateway's +10.00", c.rp, text, want)
		}
		if got := strings.Contains(text, "ReverseProxy misses the TTFT target too, by 2.00 ms"); got != c.floorMissed {
			t.Errorf("rp %v: floor named %v, want %v: %q", c.rp, got, c.floorMissed, text)
		}
	}
}

// The gateway's TTFTs by pod print each pod's count and p50, pods in name order.
func TestFmtByPod(t *testing.T) {
	got := fmtByPod(map[string][]float64{"b": {4, 2, 3}, "a": {1}})
	if want := "a 1 1.00; b 3 3.00"; got != want {
		t.Fatalf("fmtByPod = %q, want %q", got, want)
	}
}
