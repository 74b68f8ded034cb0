package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/gateway/pick"
)

// TestReadViews reads the gateway's "Picked" lines back by request id, skips other lines and
// unknown ids, and maps pods to agents.
func TestReadViews(t *testing.T) {
	log := `I1206 04:03:04.500000    9127 dispatch.go:95] "Picked" requestID="r1" pod="b:2" candidates="a:1=100+50@2000;b:2=0+900@0!" afterReceived="12.5ms"
I1206 04:03:04.600000    9127 handle.go:374] "Request done" pool="p" pod="b:2"
I1206 04:03:05.000000    9127 dispatch.go:95] "Picked" requestID="other" pod="a:1" candidates="a:1=0+1@0"
`
	path := filepath.Join(t.TempDir(), "gw.log")
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	views, err := readViews(path, []string{"", "r1"}, map[string]int{"a:1": 0, "b:2": 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(views) != 2 || views[0] != nil || views[1] == nil {
		t.Fatalf("views %v", views)
	}
	v := views[1]
	if a, b := v.cands[0], v.cands[1]; a.Backlog != 100 || a.Uncached != 50 || a.Rate != 2000 || a.OverBound || !b.OverBound || b.Uncached != 900 {
		t.Fatalf("candidates %+v", v.cands)
	}
	if v.at.Hour() != 4 || v.at.Nanosecond() != 500000000 || v.took != 12500*time.Microsecond {
		t.Fatalf("decision time %v", v.at)
	}
}

// TestViewDiagCauses: each late decision goes to the cause that explains it.
func TestViewDiagCauses(t *testing.T) {
	f := agentFlags{prefillRate: 1e6}
	mk := func(c0, c1 [3]int) *view { // backlog, uncached, over
		v := &view{cands: map[int]pick.Considered{}}
		for i, c := range [][3]int{c0, c1} {
			v.cands[i] = pick.Considered{Backlog: c[0], Uncached: c[1], OverBound: c[2] == 1}
		}
		return v
	}
	var d viewDiag
	model := []int{0, 5000} // the model: pod 0 idle, pod 1 queued 5000
	own := []int{1000, 1000}
	d.add(mk([3]int{0, 1000, 1}, [3]int{0, 1000, 0}), 1, 0, model, own, 2*time.Millisecond, f, time.Time{})    // pod 0 over the bound
	d.add(mk([3]int{9000, 1000, 0}, [3]int{0, 1000, 0}), 1, 0, model, own, 5*time.Millisecond, f, time.Time{}) // pod 0's queue overestimated
	d.add(mk([3]int{0, 9000, 0}, [3]int{5000, 1000, 0}), 1, 0, model, own, 5*time.Millisecond, f, time.Time{}) // own prompt misjudged on pod 0
	d.add(mk([3]int{0, 1000, 0}, [3]int{5000, 1000, 0}), 1, 0, model, own, 5*time.Millisecond, f, time.Time{}) // its view ranked pod 0 first
	d.add(mk([3]int{0, 1000, 0}, [3]int{5000, 1000, 0}), 0, 0, model, own, 0, f, time.Time{})                  // not late
	if d.bound != 1 || d.backlog != 1 || d.own != 1 || d.other != 1 || d.seen != 5 {
		t.Fatalf("causes %+v", d)
	}
	if d.excess != [4]time.Duration{2 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond} {
		t.Fatalf("excess by cause %v", d.excess)
	}
}

// TestReplayShifted: with every decision at its trace time the shifted replay is the trace-time
// replay; a decision moved later moves its request's arrival, and the replay follows it.
func TestReplayShifted(t *testing.T) {
	rows := []traceRow{
		{Timestamp: 0, InputLength: 1024, OutputLength: 8, HashIDs: []uint64{0, 1}},
		{Timestamp: 500, InputLength: 1024, OutputLength: 8, HashIDs: []uint64{5, 6}},
	}
	reqs := prepare(replay(rows, 1, 8), 16)
	f := agentFlags{slots: 4, prefillRate: 1000, decodeRate: 100, kvTokens: 1 << 16, blockSize: 16}
	start := time.Unix(1000, 0)
	assign := []int{0, 0}
	views := []*view{{at: start}, {at: start.Add(500 * time.Millisecond)}}
	s, err := replayShifted(reqs, assign, views, start, 2, f)
	gw, _, _ := modelTTFTs(reqs, assign, 2, f)
	or, _, _ := oracleTTFTs(reqs, 2, f)
	if err != nil || !s.ok || s.gateway != mean(gw) || s.oracle != mean(or) {
		t.Fatalf("unshifted: %+v (%v), want gateway %v oracle %v", s, err, mean(gw), mean(or))
	}
	// The second request decided after the first one's prefill (about 1 s) ends: no queue.
	views[1].at = start.Add(3 * time.Second)
	if s, err = replayShifted(reqs, assign, views, start, 2, f); err != nil || s.gateway >= mean(gw) {
		t.Fatalf("shifted: gateway %v, want below the queued %v (%v)", s.gateway, mean(gw), err)
	}
	if s, _ := replayShifted(reqs, assign, []*view{nil, nil}, start, 2, f); s.ok {
		t.Fatal("no decision logged, yet a shifted replay")
	}
}
