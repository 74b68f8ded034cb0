package main

import (
	"bufio"
	"cmp"
	"fmt"
	"os"
	"regexp"
	"slices"
	"time"

	"github.com/neuronetes/neuronetes/gateway/pick"
)

// view is what the gateway's picker saw when it placed one request (its "Picked" log line at
// verbosity 5): each candidate by agent index.
type view struct {
	at    time.Time     // when the gateway logged the decision
	took  time.Duration // from the gateway receiving the request to the decision (0: not logged)
	cands map[int]pick.Considered
}

var pickedLine = regexp.MustCompile(`^I(\d{4} \d\d:\d\d:\d\d\.\d{6}).*"Picked" requestID="([^"]+)" pod="[^"]*" candidates="([^"]*)"(?: afterReceived="([^"]+)")?`)

// readViews reads the gateway's decisions from its log: per request (ids[i] is request i's
// X-Request-Id), the candidates as the picker saw them; index maps a pod name to its agent.
func readViews(logPath string, ids []string, index map[string]int) ([]*view, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, fmt.Errorf("gateway log: %w", err)
	}
	defer f.Close()
	byID := make(map[string]int, len(ids))
	for i, id := range ids {
		if id != "" {
			byID[id] = i
		}
	}
	out := make([]*view, len(ids))
	year := time.Now().Year()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := pickedLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		i, ok := byID[m[2]]
		if !ok {
			continue
		}
		cs, err := pick.ParseConsidered(m[3])
		if err != nil {
			return nil, fmt.Errorf("gateway log: %w", err)
		}
		at, err := time.ParseInLocation("2006 0102 15:04:05.000000", fmt.Sprintf("%d %s", year, m[1]), time.Local)
		if err != nil {
			return nil, fmt.Errorf("gateway log time: %w", err)
		}
		v := &view{at: at, cands: map[int]pick.Considered{}}
		if m[4] != "" {
			if v.took, err = time.ParseDuration(m[4]); err != nil {
				return nil, fmt.Errorf("gateway log: %w", err)
			}
		}
		for _, c := range cs {
			if j, ok := index[c.Pod]; ok {
				v.cands[j] = c
			}
		}
		out[i] = v // a retried request keeps its last decision
	}
	return out, sc.Err()
}

// viewDiag decomposes the gateway's late decisions (regret.worse) by what made its view of the
// pods differ from the model's at the request's arrival.
type viewDiag struct {
	seen    int // decisions with a logged view
	bound   int // worse: the model's soonest pod was over the gateway's load bound
	backlog int // worse: the gateway misjudged the pods' queued uncached prefill most
	own     int // worse: it misjudged this request's own uncached prompt most
	other   int // worse: its own view ranked the soonest pod no better (ties, a tie-break)
	// excess is the summed delay of the late decisions' first tokens over the soonest pod's (in
	// the model), by cause: the bound, the queue, the own prompt, other.
	excess [4]time.Duration
	// Per candidate and decision, gateway minus model, in tokens.
	backlogErr, backlogAbs, ownAbs float64
	cands                          int
	over, underBacklog             int // candidates whose backlog the gateway over- or underestimated by > 1 ms of prefill
	rate                           float64
	rates                          int
	lag                            time.Duration // summed: decision logged after the request's trace time
	took                           time.Duration // summed: of lag, from the gateway receiving the request
}

// add judges one decision: chosen pod c, the model's soonest s, the model's per-pod backlog and
// own uncached tokens; excess is how much later the first token comes on c than on s (the
// decision is late beyond 1 ms).
func (d *viewDiag) add(v *view, c, s int, mBacklog, mOwn []int, excess time.Duration, f agentFlags, sent time.Time) {
	worse := excess > time.Millisecond
	if v == nil {
		return
	}
	d.seen++
	d.lag += v.at.Sub(sent)
	d.took += v.took
	tol := f.prefillRate / 1000 // tokens in 1 ms of prefill
	for p, x := range v.cands {
		e := float64(x.Backlog - mBacklog[p])
		d.backlogErr += e
		d.backlogAbs += abs(e)
		d.ownAbs += abs(float64(x.Uncached - mOwn[p]))
		d.cands++
		switch {
		case e > tol:
			d.over++
		case e < -tol:
			d.underBacklog++
		}
		if x.Rate > 0 {
			d.rate += x.Rate / f.prefillRate
			d.rates++
		}
	}
	if !worse {
		return
	}
	vc, okc := v.cands[c]
	vs, oks := v.cands[s]
	cause := 3
	switch {
	case !okc || !oks:
	case vs.OverBound:
		cause = 0
	case vc.Backlog+vc.Uncached > vs.Backlog+vs.Uncached:
	default:
		dB := float64((vc.Backlog - vs.Backlog) - (mBacklog[c] - mBacklog[s]))
		dU := float64((vc.Uncached - vs.Uncached) - (mOwn[c] - mOwn[s]))
		if cause = 1; dB > dU {
			cause = 2
		}
	}
	*[...]*int{&d.bound, &d.backlog, &d.own, &d.other}[cause]++
	d.excess[cause] += excess
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// String is the diagnosis: why the late decisions were late, and how far the gateway's view was
// from the model's.
func (d viewDiag) String() string {
	if d.seen == 0 {
		return "no gateway decisions logged"
	}
	n := float64(max(d.cands, 1))
	rate := "no rate learnt"
	if d.rates > 0 {
		rate = fmt.Sprintf("learnt prefill rate %.3fx the pods' true rate", d.rate/float64(d.rates))
	}
	per := func(i int) float64 { return ms(d.excess[i]) / float64(d.seen) }
	return fmt.Sprintf("late decisions by cause: %d the soonest pod over the load bound, %d queued prefill misjudged, %d own uncached prompt misjudged, %d other (ties); "+
		"their first tokens' delay over the soonest pod's, per decision: %.1f ms bound + %.1f ms queue + %.1f ms own prompt + %.1f ms other; "+
		"per pod, the gateway's queued prefill minus the model's: mean %+.0f tokens, mean |error| %.0f (%.1f%% over, %.1f%% under by > 1 ms of prefill); own uncached mean |error| %.0f tokens; %s; decisions logged %.1f ms after trace time on average (%.1f ms of it from the gateway receiving the request; %d decisions)",
		d.bound, d.backlog, d.own, d.other, per(0), per(1), per(2), per(3), d.backlogErr/n, d.backlogAbs/n, 100*float64(d.over)/n, 100*float64(d.underBacklog)/n,
		d.ownAbs/n, rate, ms(d.lag)/float64(d.seen), ms(d.took)/float64(d.seen), d.seen)
}

// shifted is the model replay with the requests arriving when the gateway decided them (its
// logged decision times; the trace time where none was logged): the gateway's decisions and the
// greedy oracle's, both at those arrivals. The gap between the two is what the gateway's routing
// misses given the timing this machine gave it; what remains of the trace-time gap beyond it is
// the machine's delay and reordering of the requests (the gateway's CPU, the client's, the
// agents'), which no routing decision can undo.
type shifted struct {
	gateway, oracle  float64 // mean model TTFT, ms
	gwHit, oracleHit float64
	ok               bool
}

func (s shifted) String() string {
	if !s.ok {
		return "no decision times logged"
	}
	return fmt.Sprintf("at the gateway's own decision times as arrivals: gateway %.1f ms, greedy oracle %.1f ms (%.3fx), hit rate %.3fx the oracle's",
		s.gateway, s.oracle, s.gateway/s.oracle, s.gwHit/s.oracleHit)
}

// replayShifted replays assign and the oracle with every request arriving at its decision time.
func replayShifted(reqs []prepared, assign []int, views []*view, start time.Time, pods int, f agentFlags) (shifted, error) {
	if len(views) != len(reqs) {
		return shifted{}, nil
	}
	order := make([]int, len(reqs))
	at := make([]time.Duration, len(reqs))
	seen := 0
	for i := range reqs {
		order[i] = i
		at[i] = reqs[i].at
		if views[i] != nil {
			at[i] = max(views[i].at.Sub(start), 0)
			seen++
		}
	}
	if seen == 0 {
		return shifted{}, nil
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(at[a], at[b]) })
	moved := make([]prepared, len(reqs))
	movedAssign := make([]int, len(reqs))
	for j, i := range order {
		moved[j] = reqs[i]
		moved[j].at = at[i]
		movedAssign[j] = assign[i]
	}
	var s shifted
	gw, gwHit, err := modelTTFTs(moved, movedAssign, pods, f)
	if err != nil {
		return s, err
	}
	or, orHit, err := oracleTTFTs(moved, pods, f)
	if err != nil {
		return s, err
	}
	return shifted{gateway: mean(gw), oracle: mean(or), gwHit: gwHit, oracleHit: orHit, ok: true}, nil
}
