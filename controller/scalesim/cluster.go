package scalesim

import (
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/neuronetes/neuronetes/warmpool"
)

// Model is the replica model.
type Model struct {
	// PrefillTPS is a replica's prompt throughput (tokens/s); prompts are
	// prefilled one at a time, first come first served, from a pool-wide queue.
	PrefillTPS float64
	// DecodeTPS is the generation speed of one sequence (tokens/s).
	DecodeTPS float64
	// Slots is the number of sequences (prefilling or decoding) a replica holds.
	Slots int
	// ColdStart is the time from creating a replica to serving.
	ColdStart time.Duration
	// WarmActivation is the time from activating a warm replica to serving.
	WarmActivation time.Duration
	// SLO bounds a request's raw TTFT, from its arrival to its first token
	// (the end of its prefill), the quantity a model server's TTFT histogram
	// records: a request is within the SLO when TTFT <= SLO.
	SLO time.Duration
	// Step is the simulation time step.
	Step time.Duration
	// Warmup is excluded from the evaluation for every policy alike: requests
	// arriving before it are not counted and neither are replica-seconds. It
	// gives reactive policies the history a long-running pool would have.
	Warmup time.Duration
	// Routing is where a request waits for a replica (default RoutePool).
	Routing Routing
	// Sessions is what the concurrent-sessions metric counts, which depends on
	// the metric names the pool's servers export (default SessionsRunning).
	Sessions Sessions
	// TTFTBuckets are the finite upper bounds (seconds, increasing) of the TTFT
	// histogram the pool's servers export. The adaptive policy's first-token
	// counts are then interpolated within them, as the controller interpolates
	// the scraped histogram (scalepolicy.HistogramTTFTCounts). Empty: exact
	// counts, as a histogram with bounds at the SLO and at the margin gives.
	TTFTBuckets []float64
}

type state int

const (
	starting   state = iota // cold start towards serving
	activating              // warm -> serving
	serving
	draining // finishing its work, then gone (or back to warm)
	warming  // cold start towards warm
	warm
)

type job struct {
	arrival, remaining float64
	in, out            int
}

type replica struct {
	id      int
	created float64
	st      state
	readyAt float64
	prefill *job
	decodes []float64
	queue   []job // the replica's own waiting requests (RouteLeastPrefill)
}

func (r *replica) busy() bool { return r.prefill != nil || len(r.decodes) > 0 || len(r.queue) > 0 }

// sample is the pool state at one second.
type sample struct {
	waiting, waitingTokens, running float64 // waitingTokens: prompt tokens of queued requests
	ready, target, total, warm      float64
	arrivals, promptTokens, genTok  float64 // promptTokens: of the requests arriving
	prefilled                       float64 // prompt tokens of the prefills that ended, as a server's counter counts them
}

// cluster is the simulated pool.
type cluster struct {
	m      Model
	reqs   []Request
	next   int
	queue  []job
	reps   []*replica
	now    float64
	target int
	// warm pool, planned by package warmpool as the AgentPool reconciler does
	warmWant       int
	replenishDelay float64
	replenishBatch int
	lastActivation float64 // -1: never
	nextID         int

	samples []sample
	cur     sample
	// ttfts holds every first token in time order, evaluated or not, as the
	// pool's TTFT histogram would.
	ttfts    []ttftEvent
	met, all int
	missed   int // evaluated requests that missed the SLO so far
	// missedReqs are those of them that got a first token, in the order of it.
	missedReqs []MissedRequest
	served     int // evaluated requests that got their first token so far
	repSec     float64
	warmSec    float64
	changes    []change
}

// ttftEvent is one first token: when it came, the request's raw TTFT, and
// whether the request counts in the evaluation (it arrived after the warm-up).
type ttftEvent struct {
	t, ttft, prefill float64
	eval             bool
	// tokens are the request's prompt tokens.
	tokens float64
}

type change struct {
	t        float64
	from, to int
}

func newCluster(m Model, reqs []Request, initial int) *cluster {
	c := &cluster{m: m, reqs: reqs, target: initial, lastActivation: -1}
	for range initial {
		c.add(serving, 0)
	}
	return c
}

func (c *cluster) count(sts ...state) int {
	n := 0
	for _, r := range c.reps {
		for _, s := range sts {
			if r.st == s {
				n++
			}
		}
	}
	return n
}

// setTarget records and applies a new serving target.
func (c *cluster) setTarget(n int) {
	if n != c.target {
		c.changes = append(c.changes, change{c.now, c.target, n})
		c.target = n
	}
	c.reconcile()
}

func (c *cluster) add(st state, readyAt float64) *replica {
	r := &replica{id: c.nextID, created: c.now, st: st, readyAt: readyAt}
	c.nextID++
	c.reps = append(c.reps, r)
	return r
}

// reconcile applies one warmpool.Decide plan, like the AgentPool reconciler:
// scale-up activates warm replicas first and cold starts the rest, scale-down
// drains serving replicas, and the warm pool is trimmed or replenished
// (after the delay since the last activation, at most batch starting at once).
func (c *cluster) reconcile() {
	in := warmpool.Input{Desired: int32(c.target), WarmTarget: int32(c.warmWant), UseWarmPool: c.warmWant > 0,
		Delay: time.Duration(c.replenishDelay * float64(time.Second)), BatchSize: int32(c.replenishBatch), Now: simTime(c.now)}
	if c.lastActivation >= 0 {
		in.LastActivation = simTime(c.lastActivation)
	}
	byName := map[string]*replica{}
	for _, r := range c.reps {
		p := warmpool.Pod{Name: strconv.Itoa(r.id), Created: simTime(r.created)}
		switch r.st {
		case starting, activating:
			p.State = warmpool.Serving
		case serving:
			p.State, p.Ready = warmpool.Serving, true
		case warming:
			p.State = warmpool.Warm
		case warm:
			p.State, p.Ready = warmpool.Warm, true
		case draining:
			p.State, p.Terminating = warmpool.Draining, true
		}
		byName[p.Name] = r
		in.Pods = append(in.Pods, p)
	}
	plan := warmpool.Decide(in)
	for _, n := range plan.Activate {
		r := byName[n]
		r.st, r.readyAt = activating, math.Max(r.readyAt, c.now)+c.m.WarmActivation.Seconds()
	}
	if len(plan.Activate) > 0 {
		c.lastActivation = c.now
	}
	for range plan.CreateServing {
		c.add(starting, c.now+c.m.ColdStart.Seconds())
	}
	for range plan.CreateWarm {
		c.add(warming, c.now+c.m.ColdStart.Seconds())
	}
	for _, n := range plan.Drain {
		byName[n].st = draining
	}
	if len(plan.Trim) > 0 {
		trim := map[*replica]bool{}
		for _, n := range plan.Trim {
			trim[byName[n]] = true
		}
		kept := c.reps[:0]
		for _, r := range c.reps {
			if !trim[r] {
				kept = append(kept, r)
			}
		}
		c.reps = kept
	}
}

// simTime maps simulated seconds to a wall time for the warmpool planner.
func simTime(s float64) time.Time { return epoch.Add(time.Duration(s * float64(time.Second))) }

// step advances the pool by dt seconds.
func (c *cluster) step(dt float64) {
	end := c.now + dt
	for c.next < len(c.reqs) && c.reqs[c.next].Arrival < end {
		r := c.reqs[c.next]
		c.queue = append(c.queue, job{arrival: r.Arrival, remaining: float64(r.In), in: r.In, out: r.Out})
		c.cur.arrivals++
		c.cur.promptTokens += float64(r.In)
		c.next++
	}
	for _, r := range c.reps {
		if r.readyAt <= end {
			switch r.st {
			case starting, activating:
				r.st = serving
			case warming:
				r.st = warm
			}
		}
	}
	if c.m.Routing == RouteLeastPrefill {
		c.route()
	}
	kept := c.reps[:0]
	for _, r := range c.reps {
		if r.st == serving || r.st == draining {
			c.work(r, end, dt)
		}
		if r.st == draining && !r.busy() {
			continue
		}
		kept = append(kept, r)
	}
	c.reps = kept
	if c.now >= c.m.Warmup.Seconds() {
		c.repSec += float64(len(c.reps)) * dt
		c.warmSec += float64(c.count(warm, warming)) * dt
	}
	c.now = end
}

// work runs one replica for dt: decodes progress, then the prefill engine
// takes prompts from its queue (the pool's, or its own under
// RouteLeastPrefill) while a slot is free.
func (c *cluster) work(r *replica, end, dt float64) {
	dec := c.m.DecodeTPS * dt
	kept := r.decodes[:0]
	for _, left := range r.decodes {
		c.cur.genTok += math.Min(left, dec)
		if left > dec {
			kept = append(kept, left-dec)
		}
	}
	r.decodes = kept
	budget := c.m.PrefillTPS * dt
	q := &c.queue
	if c.m.Routing == RouteLeastPrefill {
		// A pod finishes what it accepted, draining or not.
		q = &r.queue
	} else if r.st != serving {
		q = &[]job{}
	}
	for budget > 0 {
		if r.prefill == nil {
			if len(*q) == 0 || len(r.decodes)+1 > c.m.Slots {
				return
			}
			j := (*q)[0]
			*q = (*q)[1:]
			r.prefill = &j
		}
		use := math.Min(budget, r.prefill.remaining)
		r.prefill.remaining -= use
		budget -= use
		if r.prefill.remaining <= 1e-9 {
			done := end - budget/c.m.PrefillTPS
			p := r.prefill
			// A server counts a prompt's tokens when its prefill ends, with its
			// first token (vllm:prompt_tokens_total, neuronetes_tokens_total).
			c.cur.prefilled += float64(p.in)
			ttft := done - p.arrival
			eval := p.arrival >= c.m.Warmup.Seconds()
			c.ttfts = append(c.ttfts, ttftEvent{done, ttft, float64(p.in) / c.m.PrefillTPS, eval, float64(p.in)})
			if eval {
				c.all++
				c.served++
				if ttft <= c.m.SLO.Seconds()+1e-9 {
					c.met++
				} else {
					c.missed++
					c.missedReqs = append(c.missedReqs, MissedRequest{Arrival: p.arrival, TTFT: ttft, Prefill: float64(p.in) / c.m.PrefillTPS})
				}
			}
			if p.out > 1 {
				r.decodes = append(r.decodes, float64(p.out-1))
			}
			r.prefill = nil
		}
	}
}

// record closes the current one-second sample.
func (c *cluster) record() {
	s := c.cur
	for _, j := range c.queue {
		s.waiting++
		s.waitingTokens += j.remaining
	}
	for _, r := range c.reps {
		for _, j := range r.queue {
			s.waiting++
			s.waitingTokens += j.remaining
		}
		if r.prefill != nil {
			s.running++
		}
		s.running += float64(len(r.decodes))
	}
	s.ready = float64(c.count(serving))
	s.target = float64(c.target)
	s.total = float64(len(c.reps))
	s.warm = float64(c.count(warm, warming))
	c.samples = append(c.samples, s)
	c.cur = sample{}
}

// window returns the samples of the last w seconds (at least one).
func (c *cluster) window(w float64) []sample {
	n := max(int(math.Round(w)), 1)
	if n > len(c.samples) {
		n = len(c.samples)
	}
	return c.samples[len(c.samples)-n:]
}

// avg averages f over the last w seconds.
func (c *cluster) avg(w float64, f func(sample) float64) float64 {
	ws := c.window(w)
	if len(ws) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range ws {
		s += f(x)
	}
	return s / float64(len(ws))
}

// recentTTFTs returns the first tokens of the last w seconds.
func (c *cluster) recentTTFTs(w float64) []ttftEvent {
	from := c.now - w
	i := sort.Search(len(c.ttfts), func(i int) bool { return c.ttfts[i].t >= from })
	return c.ttfts[i:]
}

// ttftQuantile is the q-quantile raw TTFT of the first tokens of the last w seconds.
func (c *cluster) ttftQuantile(q, w float64) (float64, bool) {
	return c.quantile(q, w, func(e ttftEvent) float64 { return e.ttft })
}

// quantile is the q-quantile of f over the first tokens of the last w seconds.
func (c *cluster) quantile(q, w float64, f func(ttftEvent) float64) (float64, bool) {
	es := c.recentTTFTs(w)
	if len(es) == 0 {
		return 0, false
	}
	vs := make([]float64, 0, len(es))
	for _, e := range es {
		vs = append(vs, f(e))
	}
	sort.Float64s(vs)
	return vs[max(int(math.Ceil(q*float64(len(vs))))-1, 0)], true
}

// sloCounts counts the first tokens of the last w seconds and those within the SLO.
func (c *cluster) sloCounts(w float64) (within, total int) {
	for _, e := range c.recentTTFTs(w) {
		total++
		if e.ttft <= c.m.SLO.Seconds()+1e-9 {
			within++
		}
	}
	return within, total
}

// done reports whether every request has been served.
func (c *cluster) done() bool {
	if c.next < len(c.reqs) || len(c.queue) > 0 {
		return false
	}
	for _, r := range c.reps {
		if r.busy() {
			return false
		}
	}
	return true
}
