package scalesim

import (
	"math"
	"sort"
	"time"
)

// FlapWindow: a scaling operation that reverses the direction of the previous
// one within this window counts as a flap.
const FlapWindow = 300 * time.Second

// Point is one plotted sample (every 10 s).
type Point struct {
	// T is seconds since the start.
	T float64
	// Load is prompt plus generated tokens per second arriving.
	Load float64
	// Replicas counts every replica that costs (serving, starting, draining, warm).
	Replicas float64
	// Serving counts ready serving replicas.
	Serving float64
	// Warm counts warm replicas (ready or warming).
	Warm float64
	// Served counts the evaluated requests whose first token came within the
	// last 10 s; Misses how many of them missed the SLO.
	Served, Misses int
}

// Result is one policy's outcome on one trace.
type Result struct {
	// Policy is the policy name.
	Policy string
	// Requests is the number of requests; WithinSLO how many met the TTFT SLO
	// (requests never served count as misses).
	Requests, WithinSLO int
	// Infeasible counts the requests whose unloaded TTFT (their own prefill
	// time) already exceeds the SLO: they miss under every policy.
	Infeasible int
	// ReplicaSeconds is the integral of all replicas (warm ones included) over the trace.
	ReplicaSeconds float64
	// WarmSeconds is the part of ReplicaSeconds spent warm.
	WarmSeconds float64
	// ScaleOps counts changes of the serving target; Flaps the reversals within FlapWindow.
	ScaleOps, Flaps int
	// P95TTFT is the p95 raw TTFT of the evaluated requests that got a first token (s).
	P95TTFT float64
	// Series is the plot data.
	Series []Point
	// Missed are the evaluated requests that got a first token after the
	// SLO, in the order of their first tokens (those never served are
	// Requests - WithinSLO - len(Missed)).
	Missed []MissedRequest
}

// MissedRequest is one request that missed the SLO: when it arrived, its
// raw TTFT and its own prefill time (its unloaded TTFT), in seconds. The SLO
// less its prefill is the wait it could afford.
type MissedRequest struct {
	Arrival, TTFT, Prefill float64
}

// Attainment is the fraction of requests within the SLO.
func (r Result) Attainment() float64 {
	if r.Requests == 0 {
		return 1
	}
	return float64(r.WithinSLO) / float64(r.Requests)
}

// Run replays tr against m under p, starting with initial serving replicas.
// Cost is counted until the last arrival; requests still unserved 10 minutes
// after it are misses.
func Run(tr Trace, m Model, p Policy, initial int) Result {
	if m.Step <= 0 {
		m.Step = 100 * time.Millisecond
	}
	c := newCluster(m, tr.Requests, initial)
	if wp, ok := p.(WarmPooled); ok {
		n, delay, batch := wp.WarmPool()
		c.warmWant, c.replenishDelay, c.replenishBatch = n, delay.Seconds(), batch
		for range n {
			c.add(warm, 0)
		}
	}
	dt := m.Step.Seconds()
	end := tr.Duration()
	every := p.Interval().Seconds()
	nextTick, nextSec := 0.0, 1.0
	var series []Point
	var costAtEnd, warmAtEnd float64
	missedAt, servedAt := 0, 0
	ended := false
	var load float64
	for {
		if c.now >= nextTick-1e-9 && c.now <= end {
			c.setTarget(max(p.Decide(View{c}), 0))
			nextTick += every
		}
		c.step(dt)
		if c.now >= nextSec-1e-9 {
			load += c.cur.promptTokens + c.cur.genTok
			c.record()
			c.reconcile()
			if int(nextSec)%10 == 0 && c.now <= end {
				s := c.samples[len(c.samples)-1]
				series = append(series, Point{T: c.now, Load: load / 10, Replicas: s.total, Serving: s.ready,
					Warm: s.warm, Served: c.served - servedAt, Misses: c.missed - missedAt})
				load, missedAt, servedAt = 0, c.missed, c.served
			}
			nextSec++
		}
		if !ended && c.now >= end {
			ended, costAtEnd, warmAtEnd = true, c.repSec, c.warmSec
		}
		if ended && (c.done() || c.now > end+600) {
			break
		}
	}
	evaluated, infeasible := 0, 0
	for _, r := range tr.Requests {
		if r.Arrival >= m.Warmup.Seconds() {
			evaluated++
			if float64(r.In)/m.PrefillTPS > m.SLO.Seconds()+1e-9 {
				infeasible++
			}
		}
	}
	res := Result{Policy: p.Name(), Requests: evaluated, WithinSLO: c.met, Infeasible: infeasible,
		ReplicaSeconds: costAtEnd, WarmSeconds: warmAtEnd, ScaleOps: len(c.changes), Series: series}
	res.Flaps = flaps(c.changes)
	res.P95TTFT = evaluatedP95(c.ttfts)
	res.Missed = c.missedReqs
	return res
}

func flaps(cs []change) int {
	n := 0
	for i := 1; i < len(cs); i++ {
		prev, cur := cs[i-1], cs[i]
		if (prev.to-prev.from)*(cur.to-cur.from) < 0 && cur.t-prev.t <= FlapWindow.Seconds() {
			n++
		}
	}
	return n
}

// Need returns, per second, the replicas the trace needs with perfect
// placement: the larger of prefill utilization and slot occupancy, averaged over
// bins of binW seconds, with each request's slot held from arrival for its
// prefill plus decode time.
func Need(tr Trace, m Model, binW int) []float64 {
	n := int(tr.Duration()) + 1
	pre := make([]float64, n)
	occ := make([]float64, n+1)
	for _, r := range tr.Requests {
		s := int(r.Arrival)
		pre[s] += float64(r.In) / m.PrefillTPS
		hold := float64(r.In)/m.PrefillTPS + float64(max(r.Out-1, 0))/m.DecodeTPS
		e := min(int(r.Arrival+hold), n)
		for i := s; i < e; i++ {
			occ[i]++
		}
	}
	out := make([]float64, n)
	for b := 0; b < n; b += binW {
		var p, o float64
		hi := min(b+binW, n)
		for i := b; i < hi; i++ {
			p += pre[i]
			o += occ[i]
		}
		w := float64(hi - b)
		v := math.Max(p/w, o/w/float64(m.Slots))
		for i := b; i < hi; i++ {
			out[i] = v
		}
	}
	return out
}

// OracleCurve turns Need into a replica target that knows the future: at t it
// provisions alpha x the peak need over [t, t+lookahead], lookahead being the
// cold start plus one bin, so capacity is ready before the load arrives.
func OracleCurve(need []float64, alpha float64, lookahead int, maxReplicas int) []int {
	out := make([]int, len(need))
	for t := range need {
		peak := 0.0
		for i := t; i < min(t+lookahead, len(need)); i++ {
			peak = math.Max(peak, need[i])
		}
		out[t] = max(1, min(int(math.Ceil(alpha*peak-1e-9)), maxReplicas))
	}
	return out
}

// BestOracle searches the smallest alpha whose oracle keeps at least
// attainment of the requests within SLO, and returns that run.
func BestOracle(tr Trace, m Model, attainment float64, maxReplicas int) (Result, []int) {
	const binW = 10
	need := Need(tr, m, binW)
	look := int(m.ColdStart.Seconds()) + binW
	try := func(alpha float64) (Result, []int) {
		curve := OracleCurve(need, alpha, look, maxReplicas)
		return Run(tr, m, &Oracle{curve: curve}, curve[0]), curve
	}
	lo, hi := 0.5, 1.0
	best, curve := try(hi)
	for best.Attainment() < attainment && hi < 8 {
		lo, hi = hi, hi*2
		best, curve = try(hi)
	}
	for range 7 {
		mid := (lo + hi) / 2
		r, c := try(mid)
		if r.Attainment() >= attainment {
			hi, best, curve = mid, r, c
		} else {
			lo = mid
		}
	}
	return best, curve
}

// evaluatedP95 is the 95th percentile TTFT of the evaluated first tokens (0 if none).
func evaluatedP95(es []ttftEvent) float64 {
	var vs []float64
	for _, e := range es {
		if e.eval {
			vs = append(vs, e.ttft)
		}
	}
	if len(vs) == 0 {
		return 0
	}
	sort.Float64s(vs)
	return vs[int(math.Ceil(0.95*float64(len(vs))))-1]
}
