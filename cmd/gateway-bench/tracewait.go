package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// With -trace-dir the overhead run takes a Go execution trace of ReverseProxy's process and of
// the gateway's (its --debug-trace-file) and reads from each, per backend request, where the
// proxy's goroutines wait: what the TTFT of an HTTP proxy process is made of besides CPU.

// Goroutine roles, by the function a goroutine started in.
const (
	roleHandler = "handler"        // net/http.(*conn).serve: reads the request, runs the proxy, writes the answer
	roleReader  = "backend reader" // net/http.(*persistConn).readLoop: reads the backend's response header
	roleDialer  = "dialer"         // net/http.(*Transport).startDialConnForLocked: one new backend connection
	roleOther   = "other"
)

// Waits of the handler that a request's first token waits on.
const (
	waitConn   = "backend connection" // select in net/http.(*Transport).getConn: no idle connection
	waitHeader = "response header"    // select in net/http.(*persistConn).roundTrip: request sent, header not yet read
	waitNet    = "network"
	waitLock   = "lock" // sync.Mutex, RWMutex or WaitGroup held by another goroutine
	waitOther  = "other"
)

func roleOf(startFunc string) string {
	switch startFunc {
	case "net/http.(*conn).serve":
		return roleHandler
	case "net/http.(*persistConn).readLoop":
		return roleReader
	case "net/http.(*Transport).startDialConnForLocked.func1":
		return roleDialer
	}
	return roleOther
}

// waitKind names a wait from its reason and the first non-runtime function of its stack.
func waitKind(reason, site string) string {
	switch {
	case reason == "network":
		return waitNet
	case reason == "sync":
		return waitLock
	case reason == "select" && site == "net/http.(*Transport).getConn":
		return waitConn
	case reason == "select" && site == "net/http.(*persistConn).roundTrip":
		return waitHeader
	}
	return waitOther
}

// waitProfile is what one process's trace says, per role and wait kind.
type waitProfile struct {
	created  map[string]int                // goroutines started, by role
	waits    map[[2]string][]time.Duration // {role, kind}: each wait's length
	sched    map[[2]string][]time.Duration // {role, kind of the wait before}: runnable time before running
	runnable time.Duration                 // all goroutines' runnable time
	running  map[string]time.Duration      // running time (on a P), by role
	// lockSites is the handlers' lock waits by where they waited (the first frame outside the
	// runtime and sync): summed length and count.
	lockSites map[string]*siteWaits
	// backendRequests counts the handlers' requests to a backend.
	backendRequests int
	gs              map[uint64]*goState // the builder's state
}

// siteWaits is the lock waits at one site.
type siteWaits struct {
	n     int
	total time.Duration
}

type goState struct {
	role  string
	state trace.GoState
	since time.Duration
	kind  string // the kind of the last wait, until the goroutine runs
	site  string // where the last wait was
	// lastWait is the kind of the last wait, kept while it runs.
	lastWait string
}

func newWaitProfile() *waitProfile {
	return &waitProfile{created: map[string]int{}, waits: map[[2]string][]time.Duration{},
		sched: map[[2]string][]time.Duration{}, gs: map[uint64]*goState{}, running: map[string]time.Duration{}, lockSites: map[string]*siteWaits{}}
}

// step records goroutine g moving from one state to another at time at; startFunc names the
// function it started in (used the first time g is seen), reason and site the wait it enters.
func (p *waitProfile) step(g uint64, startFunc string, from, to trace.GoState, reason, site string, at time.Duration) {
	s := p.gs[g]
	if s == nil {
		s = &goState{role: roleOf(startFunc), state: from, since: at}
		p.gs[g] = s
		if from == trace.GoNotExist {
			p.created[s.role]++
		}
	}
	d := at - s.since
	switch s.state {
	case trace.GoWaiting:
		p.waits[[2]string{s.role, s.kind}] = append(p.waits[[2]string{s.role, s.kind}], d)
		if s.role == roleHandler && s.kind == waitLock {
			w := p.lockSites[s.site]
			if w == nil {
				w = &siteWaits{}
				p.lockSites[s.site] = w
			}
			w.n++
			w.total += d
		}
	case trace.GoRunning:
		p.running[s.role] += d
	case trace.GoRunnable:
		p.runnable += d
		p.sched[[2]string{s.role, s.kind}] = append(p.sched[[2]string{s.role, s.kind}], d)
		s.kind = waitOther
	}
	switch to {
	case trace.GoWaiting:
		s.kind, s.site = waitKind(reason, site), site
		// roundTrip waits twice for one request (the request written, then the header): a
		// request is a header wait that does not follow one.
		if s.role == roleHandler && s.kind == waitHeader && s.lastWait != waitHeader {
			p.backendRequests++
		}
		s.lastWait = s.kind
	case trace.GoRunnable:
		if s.state != trace.GoWaiting {
			s.kind = waitOther // preempted or new: not a wake
		}
	}
	s.state, s.since = to, at
}

// requests is the backend requests the handlers sent.
func (p *waitProfile) requests() int { return p.backendRequests }

// topLockSites are the n sites where the handlers waited longest on locks, longest first, as
// "site count/ms per request".
func (p *waitProfile) topLockSites(n int) []string {
	sites := make([]string, 0, len(p.lockSites))
	for k := range p.lockSites {
		sites = append(sites, k)
	}
	sort.Slice(sites, func(i, j int) bool {
		a, b := p.lockSites[sites[i]], p.lockSites[sites[j]]
		if a.total != b.total {
			return a.total > b.total
		}
		return sites[i] < sites[j]
	})
	out := make([]string, 0, n)
	for _, k := range sites[:min(n, len(sites))] {
		w := p.lockSites[k]
		out = append(out, fmt.Sprintf("%s %d/%.3f", k, w.n, ms(w.total)/float64(max(p.requests(), 1))))
	}
	return out
}

// allRunning is every goroutine's running time.
func (p *waitProfile) allRunning() time.Duration {
	var s time.Duration
	for _, d := range p.running {
		s += d
	}
	return s
}

// perRequest is the summed length of the role's waits of kind per backend request, in ms.
func (p *waitProfile) perRequest(role, kind string) float64 {
	var s time.Duration
	for _, d := range p.waits[[2]string{role, kind}] {
		s += d
	}
	return ms(s) / float64(max(p.requests(), 1))
}

// schedQ is the q-quantile (ms) of the role's runnable time after a wait of kind.
func (p *waitProfile) schedQ(role, kind string, q float64) float64 {
	return durQuantile(p.sched[[2]string{role, kind}], q)
}

func durQuantile(ds []time.Duration, q float64) float64 {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = ms(d)
	}
	return quantile(xs, q)
}

// readTraceWaits reads an execution trace into a waitProfile.
func readTraceWaits(r io.Reader) (*waitProfile, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, err
	}
	p := newWaitProfile()
	var t0 trace.Time
	for {
		ev, err := tr.ReadEvent()
		if err == io.EOF {
			return p, nil
		}
		if err != nil {
			return nil, err
		}
		if t0 == 0 {
			t0 = ev.Time()
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		from, to := st.Goroutine()
		start := ""
		if p.gs[uint64(st.Resource.Goroutine())] == nil {
			start = outermost(st.Stack)
		}
		site := ""
		if to == trace.GoWaiting {
			site = firstOwnFrame(st.Stack)
		}
		p.step(uint64(st.Resource.Goroutine()), start, from, to, st.Reason, site, time.Duration(ev.Time()-t0))
	}
}

// outermost is a stack's last frame: the function the goroutine started in.
func outermost(s trace.Stack) string {
	var f string
	for fr := range s.Frames() {
		f = fr.Func
	}
	return f
}

// firstOwnFrame is the innermost frame outside the runtime and sync: where a goroutine waits.
func firstOwnFrame(s trace.Stack) string {
	for fr := range s.Frames() {
		if !strings.HasPrefix(fr.Func, "runtime.") && !strings.HasPrefix(fr.Func, "sync.") && !strings.HasPrefix(fr.Func, "internal/") {
			return fr.Func
		}
	}
	return ""
}

// readTraceFile is readTraceWaits of a file.
func readTraceFile(path string) (*waitProfile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, err := readTraceWaits(f)
	if err != nil {
		return nil, fmt.Errorf("execution trace %s: %w", path, err)
	}
	return p, nil
}

// printTraceWaits writes the per-request waits of each process side by side (names[i] is
// profs[i]'s column).
func printTraceWaits(w io.Writer, names []string, profs []*waitProfile) {
	fmt.Fprintf(w, "%-58s", "per backend request (execution traces, whole run)")
	for _, n := range names {
		fmt.Fprintf(w, " %16s", n)
	}
	fmt.Fprintln(w)
	rows := []struct {
		name string
		f    func(p *waitProfile) float64
		unit string
	}{
		{"backend requests traced", func(p *waitProfile) float64 { return float64(p.requests()) }, "%16.0f"},
		{"handler waits for a backend connection, ms/request", func(p *waitProfile) float64 { return p.perRequest(roleHandler, waitConn) }, "%16.3f"},
		{"handler waits on locks, ms/request", func(p *waitProfile) float64 { return p.perRequest(roleHandler, waitLock) }, "%16.3f"},
		{"handler lock waits per 1000 requests", func(p *waitProfile) float64 {
			return 1000 * float64(len(p.waits[[2]string{roleHandler, waitLock}])) / float64(max(p.requests(), 1))
		}, "%16.1f"},
		{"backend connections dialled", func(p *waitProfile) float64 { return float64(p.created[roleDialer]) }, "%16.0f"},
		{"handler waits for the response header, ms/request", func(p *waitProfile) float64 { return p.perRequest(roleHandler, waitHeader) }, "%16.3f"},
		{"  of which the backend reader is runnable, p50 ms", func(p *waitProfile) float64 { return p.schedQ(roleReader, waitNet, 0.5) }, "%16.3f"},
		{"  of which the backend reader is runnable, p90 ms", func(p *waitProfile) float64 { return p.schedQ(roleReader, waitNet, 0.9) }, "%16.3f"},
		{"handler runnable after a network wake, p50 ms", func(p *waitProfile) float64 { return p.schedQ(roleHandler, waitNet, 0.5) }, "%16.3f"},
		{"handler runnable after a network wake, p90 ms", func(p *waitProfile) float64 { return p.schedQ(roleHandler, waitNet, 0.9) }, "%16.3f"},
		{"handler running (on a P), ms/request", func(p *waitProfile) float64 { return ms(p.running[roleHandler]) / float64(max(p.requests(), 1)) }, "%16.3f"},
		{"all goroutines running, ms/request", func(p *waitProfile) float64 { return ms(p.allRunning()) / float64(max(p.requests(), 1)) }, "%16.3f"},
		{"all goroutines runnable, ms/request", func(p *waitProfile) float64 { return ms(p.runnable) / float64(max(p.requests(), 1)) }, "%16.3f"},
		{"goroutines started per request", func(p *waitProfile) float64 {
			n := 0
			for _, c := range p.created {
				n += c
			}
			return float64(n) / float64(max(p.requests(), 1))
		}, "%16.3f"},
	}
	for _, r := range rows {
		fmt.Fprintf(w, "%-58s", r.name)
		for _, p := range profs {
			fmt.Fprintf(w, " "+r.unit, r.f(p))
		}
		fmt.Fprintln(w)
	}
	for i, p := range profs {
		fmt.Fprintf(w, "  %s's handler lock waits by site (count/ms per request), longest first: %s\n", names[i], strings.Join(p.topLockSites(6), "; "))
	}
}

// traceWaitText is the verdict's context from the traces: the gateway's handler waits per
// request against ReverseProxy's.
func traceWaitText(rp, gw *waitProfile) string {
	return fmt.Sprintf("execution traces, per backend request: the handler waits %.3f ms for a backend connection (%d dialled), %.3f ms on locks and %.3f ms for the response header (ReverseProxy %.3f (%d dialled), %.3f and %.3f), its backend reader runnable p50 %.3f ms after the header arrives (ReverseProxy %.3f), all goroutines running %.3f ms and runnable %.3f ms (ReverseProxy %.3f and %.3f)",
		gw.perRequest(roleHandler, waitConn), gw.created[roleDialer], gw.perRequest(roleHandler, waitLock), gw.perRequest(roleHandler, waitHeader),
		rp.perRequest(roleHandler, waitConn), rp.created[roleDialer], rp.perRequest(roleHandler, waitLock), rp.perRequest(roleHandler, waitHeader),
		gw.schedQ(roleReader, waitNet, 0.5), rp.schedQ(roleReader, waitNet, 0.5),
		ms(gw.allRunning())/float64(max(gw.requests(), 1)), ms(gw.runnable)/float64(max(gw.requests(), 1)),
		ms(rp.allRunning())/float64(max(rp.requests(), 1)), ms(rp.runnable)/float64(max(rp.requests(), 1)))
}

// traceFiles are the execution trace files of ReverseProxy's process and the gateway's under
// -trace-dir ("" without it).
func (o *options) traceFiles() (rp, gw string) {
	if o.traceDir == "" {
		return "", ""
	}
	return filepath.Join(o.traceDir, "reverseproxy.trace"), filepath.Join(o.traceDir, "gateway.trace")
}

// traceWaits reads both traces, prints their per-request waits and returns the verdict's
// context.
func traceWaits(w io.Writer, rpTrace, gwTrace string) (string, error) {
	rp, err := readTraceFile(rpTrace)
	if err != nil {
		return "", err
	}
	gw, err := readTraceFile(gwTrace)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(w, "\nexecution traces: %s, %s (go tool trace FILE)\n", rpTrace, gwTrace)
	printTraceWaits(w, []string{"ReverseProxy", "gateway"}, []*waitProfile{rp, gw})
	return traceWaitText(rp, gw), nil
}
