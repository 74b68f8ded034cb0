package sim

import (
	"math"
	"sort"
	"time"
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
	// SLO is the TTFT budget over a request's unloaded TTFT (its own prefill
	// time): a request is within SLO when TTFT <= In/PrefillTPS + SLO.
	SLO time.Duration
	// Step is the simulation time step.
	Step time.Duration
	// Warmup is excluded from the evaluation for every policy alike: requests
	// arriving before it are not counted and neither are replica-seconds. It
	// gives reactive policies the history a long-running pool would have.
	Warmup time.Duration
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
	st      state
	readyAt float64
	prefill *job
	decodes []float64
}

func (r *replica) busy() bool { return r.prefill != nil || len(r.decodes) > 0 }

// sample is the pool state at one second.
type sample struct {
	waiting, waitingTokens, running float64
	ready, target, total, warm      float64
	arrivals, promptTokens, genTok  float64
}

// cluster is the simulated pool.
type cluster struct {
	m        Model
	reqs     []Request
	next     int
	queue    []job
	reps     []*replica
	now      float64
	target   int
	warmWant int
	// warm pool replenishment
	replenishDelay float64
	replenishBatch int
	deficitSince   float64

	samples  []sample
	cur      sample
	ttfts    []ttftEvent
	met, all int
	repSec   float64
	warmSec  float64
	changes  []change
}

type ttftEvent struct{ t, excess float64 }

type change struct {
	t        float64
	from, to int
}

func newCluster(m Model, reqs []Request, initial int) *cluster {
	c := &cluster{m: m, reqs: reqs, target: initial, deficitSince: -1}
	for range initial {
		c.reps = append(c.reps, &replica{st: serving})
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

// reconcile moves replicas towards the target: warm replicas are activated
// first, then replicas are cold started; removal cancels starting ones first,
// then drains the least busy serving ones.
func (c *cluster) reconcile() {
	active := c.count(starting, activating, serving)
	for active < c.target {
		if r := c.pick(warm); r != nil {
			r.st, r.readyAt = activating, c.now+c.m.WarmActivation.Seconds()
		} else {
			c.reps = append(c.reps, &replica{st: starting, readyAt: c.now + c.m.ColdStart.Seconds()})
		}
		active++
	}
	for active > c.target {
		r := c.pick(starting)
		if r == nil {
			r = c.pick(activating)
		}
		if r == nil {
			r = c.leastBusy()
		}
		if r.st == starting {
			r.st = warming // a cancelled cold start may still fill the warm pool
		} else {
			r.st = draining
		}
		active--
	}
}

func (c *cluster) pick(s state) *replica {
	for i := len(c.reps) - 1; i >= 0; i-- {
		if c.reps[i].st == s {
			return c.reps[i]
		}
	}
	return nil
}

func (c *cluster) leastBusy() *replica {
	var best *replica
	load := math.Inf(1)
	for _, r := range c.reps {
		if r.st != serving {
			continue
		}
		l := float64(len(r.decodes))
		if r.prefill != nil {
			l += 1 + r.prefill.remaining/c.m.PrefillTPS
		}
		if l < load {
			best, load = r, l
		}
	}
	return best
}

// replenish keeps the warm pool at warmWant: after the deficit has lasted
// replenishDelay, replenishBatch replicas are cold started into the pool.
func (c *cluster) replenish() {
	have := c.count(warm, warming)
	if have > c.warmWant {
		excess := have - c.warmWant
		kept := c.reps[:0]
		for _, r := range c.reps {
			if excess > 0 && (r.st == warming || r.st == warm) {
				excess--
				continue
			}
			kept = append(kept, r)
		}
		c.reps = kept
		return
	}
	if have == c.warmWant {
		c.deficitSince = -1
		return
	}
	if c.deficitSince < 0 {
		c.deficitSince = c.now
	}
	if c.now-c.deficitSince >= c.replenishDelay {
		for range min(max(c.replenishBatch, 1), c.warmWant-have) {
			c.reps = append(c.reps, &replica{st: warming, readyAt: c.now + c.m.ColdStart.Seconds()})
		}
		c.deficitSince = c.now
	}
}

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
	kept := c.reps[:0]
	for _, r := range c.reps {
		if r.readyAt <= end {
			switch r.st {
			case starting, activating:
				r.st = serving
			case warming:
				r.st = warm
			}
		}
		if r.st == serving || r.st == draining {
			c.work(r, end, dt)
		}
		if r.st == draining && !r.busy() {
			if c.count(warm, warming) < c.warmWant {
				r.st = warm
			} else {
				continue
			}
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
// takes prompts from the shared queue while a slot is free.
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
	for budget > 0 {
		if r.prefill == nil {
			if r.st != serving || len(c.queue) == 0 || len(r.decodes)+1 > c.m.Slots {
				return
			}
			j := c.queue[0]
			c.queue = c.queue[1:]
			r.prefill = &j
		}
		use := math.Min(budget, r.prefill.remaining)
		r.prefill.remaining -= use
		budget -= use
		if r.prefill.remaining <= 1e-9 {
			done := end - budget/c.m.PrefillTPS
			p := r.prefill
			ttft := done - p.arrival
			excess := ttft - float64(p.in)/c.m.PrefillTPS
			c.ttfts = append(c.ttfts, ttftEvent{done, excess})
			if p.arrival < c.m.Warmup.Seconds() {
				// not evaluated
			} else if c.all++; excess <= c.m.SLO.Seconds()+1e-9 {
				c.met++
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
		if r.prefill != nil {
			s.running++
			s.waitingTokens += r.prefill.remaining
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

// ttftP95 is the 95th percentile TTFT excess over the last w seconds.
func (c *cluster) ttftP95(w float64) (float64, bool) {
	from := c.now - w
	i := sort.Search(len(c.ttfts), func(i int) bool { return c.ttfts[i].t >= from })
	if len(c.ttfts)-i < 1 {
		return 0, false
	}
	vs := make([]float64, 0, len(c.ttfts)-i)
	for _, e := range c.ttfts[i:] {
		vs = append(vs, e.excess)
	}
	sort.Float64s(vs)
	return vs[int(math.Ceil(0.95*float64(len(vs))))-1], true
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
