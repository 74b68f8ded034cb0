package scalesim

import (
	"math"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/controller/scalepolicy"
)

// probe keeps n replicas from the start and records what a decision at each
// of its times sees.
type probe struct {
	n    int
	at   []float64
	seen []View
	look func(v View)
}

func (p *probe) Name() string            { return "probe" }
func (p *probe) Interval() time.Duration { return 100 * time.Millisecond }
func (p *probe) Decide(v View) int {
	for len(p.at) > 0 && v.Now() >= p.at[0]-1e-9 {
		p.look(v)
		p.at = p.at[1:]
	}
	return p.n
}

// burst is n requests of in prompt tokens and one output token at time 0,
// then the extra requests (in arrival order). The simulator decides until the
// last arrival.
func burst(n, in int, extra ...Request) Trace {
	var rs []Request
	for i := 0; i < n; i++ {
		rs = append(rs, Request{Arrival: 0, In: in, Out: 1})
	}
	return Trace{Name: "burst", Requests: append(rs, extra...)}
}

// tail is a one-token request at time at, which keeps the simulator deciding
// until then.
func tail(at float64) Request { return Request{Arrival: at, In: 1, Out: 1} }

func TestRoutingBacklogAndNewReplica(t *testing.T) {
	// Ten 1,000-token prompts at t=0 on one replica (1,000 tokens/s: 10 s of
	// prefill); a second replica is asked for at once and serves from t=2. A
	// short request arrives at t=3.
	m := Model{PrefillTPS: 1000, DecodeTPS: 100, Slots: 16, ColdStart: 2 * time.Second, SLO: 5 * time.Second,
		Step: 10 * time.Millisecond}
	tr := burst(10, 1000, Request{Arrival: 3, In: 100, Out: 1})
	tests := []struct {
		name   string
		route  Routing
		within int // of the 11 requests, TTFT <= 5 s
	}{
		// Pool: the new replica takes from the shared backlog; first tokens at
		// 1,2,3,3,4,4,5,5,6,6 s, then the short one, queued behind them, at
		// 6.1 s (3.1 s after its arrival).
		{"pool: a new replica takes the backlog", RoutePool, 8 + 1},
		// Least prefill: the backlog stays on the first replica (first tokens at
		// 1..10 s); the short request goes to the idle new one (0.1 s).
		{"least-prefill: a new replica takes new requests only", RouteLeastPrefill, 5 + 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := m
			m.Routing = tc.route
			r := Run(tr, m, &fixed{n: 2}, 1)
			if r.Requests != 11 || r.WithinSLO != tc.within {
				t.Fatalf("%d of %d requests within the SLO, want %d of 11", r.WithinSLO, r.Requests, tc.within)
			}
		})
	}
}

func TestRouteLeastPrefillQueuesInThePod(t *testing.T) {
	// Two serving replicas, six 1,500-token prompts at t=0: least prefill
	// alternates them, so at 1 s each replica has one prefilling and two
	// waiting, and the waiting requests and their tokens are what the pods'
	// gauges show.
	m := Model{PrefillTPS: 1000, DecodeTPS: 100, Slots: 16, SLO: 5 * time.Second, Step: 10 * time.Millisecond,
		Routing: RouteLeastPrefill}
	var waiting, tokens []float64
	p := &probe{n: 2, at: []float64{1.5}, look: func(v View) {
		waiting, tokens = append(waiting, v.Waiting(1)), append(tokens, v.WaitingTokens(1))
	}}
	r := Run(burst(6, 1500, tail(6)), m, p, 2)
	if len(waiting) != 1 || waiting[0] != 4 || tokens[0] != 6000 {
		t.Fatalf("at 1 s: waiting %v, waiting tokens %v; want 4 and 6000", waiting, tokens)
	}
	// First tokens at 1.5, 3 and 4.5 s on each replica.
	if r.WithinSLO != 7 || math.Abs(r.P95TTFT-4.5) > 0.02 {
		t.Fatalf("%d within the SLO, p95 TTFT %.2f s; want 7 within and the last first tokens at 4.5 s", r.WithinSLO, r.P95TTFT)
	}
}

func TestSessionsAndPrefilledTokens(t *testing.T) {
	// One 2,500-token prompt at t=0 on a 1,000 tokens/s replica: its prefill
	// ends at 2.5 s, when a server counts its prompt tokens.
	tr := burst(1, 2500, tail(4))
	tests := []struct {
		name     string
		sessions Sessions
		want     float64 // sessions at 1 s
	}{
		{"running sequences", SessionsRunning, 1},
		{"conversations: requests without one open none", SessionsConversations, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := Model{PrefillTPS: 1000, DecodeTPS: 10, Slots: 4, SLO: 5 * time.Second, Step: 10 * time.Millisecond,
				Sessions: tc.sessions}
			var sess, rate []float64
			p := &probe{n: 1, at: []float64{1.5, 3.5}, look: func(v View) {
				sess, rate = append(sess, v.Sessions(1)), append(rate, v.TokenRate(3))
			}}
			Run(tr, m, p, 1)
			if len(sess) != 2 || math.Abs(sess[0]-tc.want) > 1e-9 {
				t.Fatalf("sessions at 1 s: %v, want %v", sess, tc.want)
			}
			// Nothing counted in the first second, while the prompt is
			// prefilling; all 2,500 prompt tokens in the samples up to 3 s
			// (the single output token, if counted, adds at most 1).
			if rate[0] != 0 || rate[1]*3 < 2500-1e-6 || rate[1]*3 > 2501+1e-6 {
				t.Fatalf("token rate at 1 s and over 1-3 s: %v, want 0 and 2500/3", rate)
			}
		})
	}
}

func TestTTFTCountsThroughBuckets(t *testing.T) {
	// TTFTs 1..10 s (ten prompts queued on one replica); SLO 5.5 s, margin
	// AdaptiveMarginRatio x 5.5 s (2.75 s).
	tr := burst(10, 1000, tail(11))
	base := Model{PrefillTPS: 1000, DecodeTPS: 100, Slots: 16, SLO: 5500 * time.Millisecond, Step: 10 * time.Millisecond}
	margin := scalepolicy.AdaptiveMarginRatio * 5.5
	tests := []struct {
		name    string
		buckets []float64
		want    scalepolicy.TTFTCounts
	}{
		{"exact", nil, scalepolicy.TTFTCounts{Total: 10, WithinSLO: 5, WithinMargin: 2}},
		// Bounds 3.5 and 7.5 s: 3 at or below the first, 7 at or below the
		// second; the SLO interpolates half of the (3.5, 7.5] bucket, the
		// margin 2.75/3.5 of the first.
		{"buckets", []float64{3.5, 7.5}, scalepolicy.TTFTCounts{Total: 10, WithinSLO: 3 + 4*0.5, WithinMargin: 3 * margin / 3.5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := base
			m.TTFTBuckets = tc.buckets
			var got scalepolicy.TTFTCounts
			p := &probe{n: 1, at: []float64{10.5}, look: func(v View) { got = v.TTFTCounts(60) }}
			Run(tr, m, p, 1)
			if math.Abs(got.Total-tc.want.Total) > 1e-9 || math.Abs(got.WithinSLO-tc.want.WithinSLO) > 1e-9 ||
				math.Abs(got.WithinMargin-tc.want.WithinMargin) > 1e-9 {
				t.Fatalf("TTFTCounts = %+v, want %+v", got, tc.want)
			}
		})
	}
}
