package main

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/demoagent/tokenize"
	"github.com/neuronetes/neuronetes/gateway/route"
)

func TestPromptTextSharesPrefixes(t *testing.T) {
	a := traceRow{InputLength: 1000, HashIDs: []uint64{0, 1}}
	b := traceRow{InputLength: 1100, HashIDs: []uint64{0, 1, 7}}
	c := traceRow{InputLength: 600, HashIDs: []uint64{0, 2}}
	pa, pb, pc := promptText(a), promptText(b), promptText(c)
	if n := tokenize.Count(pa); n != 1000 {
		t.Fatalf("row a has %d words, want its input_length 1000", n)
	}
	if tokenize.Count(pb) != 1100 || tokenize.Count(pc) != 600 {
		t.Fatal("word counts differ from input_length")
	}
	if !strings.HasPrefix(pb, pa) {
		t.Error("equal hash ids did not give equal text")
	}
	wa, wc := strings.Fields(pa), strings.Fields(pc)
	if wa[511] != wc[511] || wa[512] == wc[512] {
		t.Error("block 0 should be shared and block 1 differ")
	}
}

func TestTraceRowCheck(t *testing.T) {
	tests := []struct {
		row  traceRow
		want string
	}{
		{traceRow{InputLength: 0}, "input_length"},
		{traceRow{InputLength: 10, OutputLength: -1, HashIDs: []uint64{1}}, "output_length"},
		{traceRow{InputLength: 513, HashIDs: []uint64{1}}, "hash_ids"},
	}
	for _, tt := range tests {
		if err := tt.row.check(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: err %v, want it to name %s", tt.row, err, tt.want)
		}
	}
}

func TestLoadTraceWindowAndReplay(t *testing.T) {
	p := filepath.Join(t.TempDir(), "t.jsonl")
	data := `{"timestamp": 1000, "input_length": 10, "output_length": 50, "hash_ids": [0]}
{"timestamp": 3000, "input_length": 600, "output_length": 2, "hash_ids": [0, 1]}
{"timestamp": 9000, "input_length": 10, "output_length": 5, "hash_ids": [3]}
`
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	rows, err := loadTrace(p, 0, 5*time.Second)
	if err != nil || len(rows) != 2 {
		t.Fatalf("rows %d, err %v; want the 2 before 5 s", len(rows), err)
	}
	if later, err := loadTrace(p, 2*time.Second, 10*time.Second); err != nil || len(later) != 2 || later[0].Timestamp != 3000 {
		t.Fatalf("window from 2 s: %+v, %v; want the rows at 3 s and 9 s", later, err)
	}
	reqs := replay(rows, 4, 32)
	if reqs[1].at != 500*time.Millisecond || reqs[0].output != 32 || reqs[1].output != 2 {
		t.Errorf("replay = %+v", reqs)
	}
	if err := os.WriteFile(p, []byte(`{"timestamp": 0, "input_length": 10, "hash_ids": [1, 2]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadTrace(p, 0, time.Hour); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad row: err %v, want it to name line 1", err)
	}
}

func TestSharedCacheHitRate(t *testing.T) {
	rows := []traceRow{
		{InputLength: 1024, OutputLength: 16, HashIDs: []uint64{0, 1}},
		{InputLength: 1536, OutputLength: 16, HashIDs: []uint64{0, 1, 2}},
	}
	reqs := prepare(replay(rows, 1, 16), 16)
	got, err := sharedCacheHitRate(reqs, 1000, 16)
	if err != nil {
		t.Fatal(err)
	}
	// Prompts are 1026 and 1538 tokens (two chat markers). The second shares the first's
	// 1025-token prefix (<|user|> + 1024 words); 1024 of them are in full blocks.
	if want := 1024.0 / (1026 + 1538); math.Abs(got-want) > 1e-9 {
		t.Errorf("hit rate %v, want %v", got, want)
	}
	if small, err := sharedCacheHitRate(reqs, 10, 16); err == nil {
		t.Errorf("a cache smaller than one request: rate %v, no error", small)
	}
}

func TestPickers(t *testing.T) {
	rr, _ := newPicker(policyRR, 3, refConfig{})
	var got []int
	for i := 0; i < 4; i++ {
		got = append(got, rr.pick(nil).backend)
	}
	if got[0] != 0 || got[1] != 1 || got[2] != 2 || got[3] != 0 {
		t.Errorf("round robin %v", got)
	}
	lr, _ := newPicker(policyLeast, 3, refConfig{})
	ta, tb, tc := lr.pick(nil), lr.pick(nil), lr.pick(nil)
	a, b, c := ta.backend, tb.backend, tc.backend
	if a == b || b == c || a == c {
		t.Errorf("least-request spread %d %d %d over 3 idle backends", a, b, c)
	}
	lr.done(tb)
	if d := lr.pick(nil).backend; d != b {
		t.Errorf("least-request picked %d, want the freed %d", d, b)
	}
	if _, err := newPicker("fastest", 2, refConfig{}); err == nil {
		t.Error("unknown policy accepted")
	}
}

func TestIsContent(t *testing.T) {
	tests := []struct {
		line string
		want bool
	}{
		{`data: {"choices":[{"delta":{"content":"tok0 ","role":"assistant"}}]}`, true},
		{`data: {"choices":[{"text":"tok0 "}]}`, true},
		{`data: {"choices":[{"delta":{"content":""}}]}`, false},
		{`data: {"choices":[{"delta":{},"finish_reason":"length"}]}`, false},
	}
	for _, tt := range tests {
		if got := isContent([]byte(tt.line)); got != tt.want {
			t.Errorf("isContent(%s) = %v", tt.line, got)
		}
	}
}

func TestQuantile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	for _, tt := range []struct{ q, want float64 }{{0, 1}, {0.5, 3}, {1, 5}, {0.99, 4.96}} {
		if got := quantile(xs, tt.q); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if !math.IsNaN(quantile(nil, 0.5)) || !math.IsNaN(mean(nil)) {
		t.Error("empty input should give NaN")
	}
}

func TestParseOptions(t *testing.T) {
	if _, err := parseOptions([]string{"-agent-bin=/x"}); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if _, err := parseOptions([]string{"-only=model"}); err != nil {
		t.Fatalf("-only=model needs no agent binary: %v", err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "-agent-bin"},
		{[]string{"-agent-bin=/x", "-only=both"}, "-only"},
		{[]string{"-agent-bin=/x", "-speedup=0"}, "-speedup"},
		{[]string{"-agent-bin=/x", "-kv-tokens=0"}, "-kv-tokens"},
	} {
		if _, err := parseOptions(tt.args); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err %v, want it to name %s", tt.args, err, tt.want)
		}
	}
}

func TestReferencePicker(t *testing.T) {
	r, err := newReference(3, refConfig{kvTokens: 1 << 16, blockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	body := func(text string) []byte {
		return []byte(`{"max_tokens":4,"messages":[{"role":"user","content":"` + text + `"}]}`)
	}
	long := strings.Repeat("alpha beta gamma delta ", 100)
	first := r.pick(body(long))
	r.done(first)
	// The next turn goes where the conversation's prefix is cached.
	again := r.pick(body(long + " tok0 more"))
	if again.backend != first.backend || again.prefill >= 100 {
		t.Fatalf("next turn to %d with %d tokens to compute; want backend %d and a cached prefix", again.backend, again.prefill, first.backend)
	}
	// While that prefill is booked, an unrelated prompt of the same size goes elsewhere.
	other := r.pick(body(strings.Repeat("one two three four ", 100)))
	if other.backend == first.backend {
		t.Errorf("unrelated prompt queued behind the booked prefill on backend %d", other.backend)
	}
	r.started(again)
	r.done(again)
	r.done(other)
	for i, q := range r.queued {
		if q != 0 {
			t.Errorf("backend %d still has %d booked tokens", i, q)
		}
	}
}

func TestModelTTFTs(t *testing.T) {
	rows := []traceRow{
		{InputLength: 1024, OutputLength: 8, HashIDs: []uint64{0, 1}},
		{InputLength: 1536, OutputLength: 8, HashIDs: []uint64{0, 1, 2}},
	}
	reqs := prepare(replay(rows, 1, 8), 16)
	f := agentFlags{slots: 4, prefillRate: 1000, decodeRate: 100, kvTokens: 1 << 16, blockSize: 16}
	tests := []struct {
		name   string
		assign []int
		want   []float64
		hit    float64
	}{
		// Both arrive at 0 on one pod: B waits for A's 1026-token prefill (1026 ms), then finds
		// A's 1024 cached prompt tokens and computes 514: first token at 1540 ms.
		{"same pod", []int{0, 0}, []float64{1026, 1540}, 1024.0 / (1026 + 1538)},
		{"two pods", []int{0, 1}, []float64{1026, 1538}, 0},
		{"unknown pod skipped", []int{-1, 1}, []float64{1538}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, hit, err := modelTTFTs(reqs, tt.assign, 2, f)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) || math.Abs(hit-tt.hit) > 1e-9 {
				t.Errorf("TTFTs %v hit %v, want %v and %v", got, hit, tt.want, tt.hit)
			}
		})
	}
	// One slot: B is admitted only when A finishes (its first token, then 7 more at 10 ms).
	f.slots = 1
	got, _, _ := modelTTFTs(reqs, []int{0, 0}, 1, f)
	slices.Sort(got)
	if want := 1026.0 + 70 + 514; got[1] != want {
		t.Errorf("one slot: B's TTFT %v, want %v", got[1], want)
	}
}

func TestOracleTTFTs(t *testing.T) {
	rows := []traceRow{
		{Timestamp: 0, InputLength: 1024, OutputLength: 8, HashIDs: []uint64{0, 1}},
		{Timestamp: 0, InputLength: 1024, OutputLength: 8, HashIDs: []uint64{5, 6}},
		{Timestamp: 5000, InputLength: 1536, OutputLength: 8, HashIDs: []uint64{0, 1, 2}},
	}
	reqs := prepare(replay(rows, 1, 8), 16)
	f := agentFlags{slots: 4, prefillRate: 1000, decodeRate: 100, kvTokens: 1 << 16, blockSize: 16}
	got, hit, err := oracleTTFTs(reqs, 2, f)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	// The two first turns go to different pods (1026 ms each); the follow-up finds its 1024
	// cached tokens on the first one's pod and computes 514.
	if want := []float64{514, 1026, 1026}; !slices.Equal(got, want) {
		t.Errorf("TTFTs %v, want %v", got, want)
	}
	if want := 1024.0 / (1026 + 1026 + 1538); math.Abs(hit-want) > 1e-9 {
		t.Errorf("hit rate %v, want %v", hit, want)
	}
}

// TestCPUWhy: the overhead verdict's explanation is the per-chunk difference of the two
// processes' counters in the pair windows.
func TestCPUWhy(t *testing.T) {
	gw := &overheadStats{chunks: 1000, counters: procCounters{user: 0.012, sys: 0.020, reads: 2000, writes: 1050, ctxSwitches: 1100, ok: true}}
	rp := &overheadStats{chunks: 2000, counters: procCounters{user: 0.020, sys: 0.040, reads: 4000, writes: 2000, ctxSwitches: 2000, ok: true}}
	want := "the gateway spends +2.0 µs user and +0.0 µs system time per chunk more than ReverseProxy, with +0.00 reads, +0.05 writes and +0.10 context switches per chunk more"
	if got := cpuWhy(gw, rp); got != want {
		t.Fatalf("cpuWhy = %q, want %q", got, want)
	}
	if got := cpuWhy(gw, &overheadStats{}); got != "per-process counters not read" {
		t.Fatalf("without counters: %q", got)
	}
}

// TestPickerTTFTs runs the gateway's picker on the model's clock over the oracle's workload: it
// sees pod-1's cache through the exact index and sends the follow-up there (514 ms), and
// its view of every pod is the model's (no late decision); a second run gives the same decisions.
func TestPickerTTFTs(t *testing.T) {
	rows := []traceRow{
		{Timestamp: 0, InputLength: 1024, OutputLength: 8, HashIDs: []uint64{5, 6}},
		{Timestamp: 0, InputLength: 1024, OutputLength: 8, HashIDs: []uint64{0, 1}},
		{Timestamp: 5000, InputLength: 1536, OutputLength: 8, HashIDs: []uint64{0, 1, 2}},
	}
	reqs := replay(rows, 1, 8)
	prep := prepare(reqs, 16)
	prompts, err := kvPrompts(reqs)
	if err != nil {
		t.Fatal(err)
	}
	f := agentFlags{slots: 4, prefillRate: 1000, decodeRate: 100, kvTokens: 1 << 16, blockSize: 16}
	base := time.Unix(1_700_000_000, 0)
	st, err := pickerTTFTs(prep, prompts, 2, f, route.DefaultPolicy(), base)
	if err != nil {
		t.Fatal(err)
	}
	got := slices.Clone(st.modelTTFTs)
	slices.Sort(got)
	if want := []float64{514, 1026, 1026}; !slices.Equal(got, want) {
		t.Errorf("TTFTs %v, want %v (assignment %v)", got, want, st.assign)
	}
	if want := []int{0, 1, 1}; !slices.Equal(st.assign, want) {
		t.Errorf("assignment %v, want %v: the first turns apart, the follow-up with its first turn's cache (pod-1, not the name's pod-0)", st.assign, want)
	}
	if g := decisionRegret(prep, st.assign, 2, f, st.views, base); g.worse != 0 || g.diag.seen != 3 {
		t.Errorf("regret %v (%d views), want no late decision of 3", g, g.diag.seen)
	}
	again, err := pickerTTFTs(prep, prompts, 2, f, route.DefaultPolicy(), base)
	if err != nil || !slices.Equal(again.assign, st.assign) {
		t.Errorf("second run %v (%v), want %v", again.assign, err, st.assign)
	}
}

// TestLeastTTFTs: least-request in the model spreads the two first turns and sends the
// follow-up, with both pods idle again, to the first.
func TestLeastTTFTs(t *testing.T) {
	rows := []traceRow{
		{Timestamp: 0, InputLength: 1024, OutputLength: 8, HashIDs: []uint64{0, 1}},
		{Timestamp: 0, InputLength: 1024, OutputLength: 8, HashIDs: []uint64{5, 6}},
		{Timestamp: 5000, InputLength: 1536, OutputLength: 8, HashIDs: []uint64{9, 1, 2}},
	}
	f := agentFlags{slots: 4, prefillRate: 1000, decodeRate: 100, kvTokens: 1 << 16, blockSize: 16}
	got, _, err := leastTTFTs(prepare(replay(rows, 1, 8), 16), 2, f)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []float64{1026, 1026, 1538}; !slices.Equal(got, want) {
		t.Errorf("TTFTs %v, want %v", got, want)
	}
}
