package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/neuronetes/neuronetes/internal/benchproc"
)

// The overhead target is judged on instructions, which do not move with machine load: the
// gateway and ReverseProxy run under valgrind's callgrind, each streams short and long
// completions from the same demo agent at the same time, and the instructions between the two
// phases over the chunks between them are each process's user-space instructions per chunk.
// Per-request work (parsing, picking, connection setup) is the same in both phases and cancels;
// the phases are padded to the same wall time, so timer-driven work (sysmon, idle timers)
// cancels too.

// instrEnv makes a Go process's instruction count repeatable: no asynchronous preemption
// signals, no garbage collection cycles (whose start depends on timing), one P.
var instrEnv = []string{"GODEBUG=asyncpreemptoff=1", "GOGC=off", "GOMAXPROCS=1"}

// instrConfig shapes the instruction count.
type instrConfig struct {
	runs        int           // independent runs (fresh processes each), 0: not counted
	requests    int           // requests per phase per proxy, one at a time
	short, long int           // tokens per request in the two phases
	rate        float64       // the agent's tokens per second per stream
	phase       time.Duration // each phase's wall time (0: the long phase's streaming time x1.5 + 3 s)
}

func (c instrConfig) phaseTime() time.Duration {
	if c.phase > 0 {
		return c.phase
	}
	return time.Duration(1.5*float64(c.requests*c.long)/c.rate*float64(time.Second)) + 3*time.Second
}

// instrCount is one process's user-space instructions in one phase, by function (self cost).
type instrCount struct {
	total int64
	fns   map[string]int64
}

// instrRun is one run's result: each process's instructions per chunk, in total and by function.
type instrRun struct {
	gw, rp       float64
	gwFns, rpFns map[string]float64
	chunks       int // chunks per process between the two phases
	load         string
	// gwReq and rpReq are each process's instructions per request (perRequest), in total and by
	// function: context for the added TTFT, not judged.
	gwReq, rpReq       float64
	gwReqFns, rpReqFns map[string]float64
}

func (r instrRun) ratio() float64 { return r.gw / r.rp }

// perChunk is (long - short) / chunks, in total and by function.
func perChunk(short, long instrCount, chunks int) (float64, map[string]float64) {
	fns := map[string]float64{}
	for f, v := range long.fns {
		fns[f] += float64(v)
	}
	for f, v := range short.fns {
		fns[f] -= float64(v)
	}
	for f := range fns {
		fns[f] /= float64(chunks)
	}
	return float64(long.total-short.total) / float64(chunks), fns
}

// perRequest is what a request costs beyond its chunks: the short phase less its chunks at the
// per-chunk cost (chunkTotal, chunkFns) and less an idle phase of the same wall time (the
// timer-driven work), over the requests; in total and by function.
func perRequest(idle, short instrCount, chunkTotal float64, chunkFns map[string]float64, chunks, requests int) (float64, map[string]float64) {
	fns := map[string]float64{}
	for f, v := range short.fns {
		fns[f] += float64(v)
	}
	for f, v := range idle.fns {
		fns[f] -= float64(v)
	}
	for f, v := range chunkFns {
		fns[f] -= v * float64(chunks)
	}
	for f := range fns {
		fns[f] /= float64(requests)
	}
	total := float64(short.total-idle.total) - chunkTotal*float64(chunks)
	return total / float64(requests), fns
}

var (
	cgName = regexp.MustCompile(`^\((\d+)\)(?: (.*))?$`)
	// cgRecursion is callgrind's mark of a function's deeper recursion level (f'2); goroutine
	// switches on one thread look like recursion to it, so the levels are summed under f.
	cgRecursion = regexp.MustCompile(`'\d+$`)
)

// parseCallgrind reads a callgrind dump (one event, Ir) and returns its self cost by function.
// A cost line right after a calls= line is the call's inclusive cost and is not a self cost.
func parseCallgrind(r io.Reader) (instrCount, error) {
	c := instrCount{fns: map[string]int64{}}
	names := map[string]string{}
	name := func(v string) string {
		m := cgName.FindStringSubmatch(v)
		if m == nil {
			return v
		}
		if m[2] != "" {
			names[m[1]] = m[2]
		}
		return names[m[1]]
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	fn, call := "", false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "fn="):
			fn = name(line[3:])
		case strings.HasPrefix(line, "cfn="):
			name(line[4:])
		case strings.HasPrefix(line, "calls="):
			call = true
		case line != "" && (line[0] >= '0' && line[0] <= '9' || line[0] == '+' || line[0] == '-' || line[0] == '*'):
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			if call {
				call = false
				continue
			}
			v, err := strconv.ParseInt(f[len(f)-1], 10, 64)
			if err != nil {
				return c, fmt.Errorf("callgrind cost line %q: %w", line, err)
			}
			c.fns[cgRecursion.ReplaceAllString(fn, "")] += v
			c.total += v
		}
	}
	return c, sc.Err()
}

// callgrindTools are the programs the count needs.
func callgrindTools() error {
	for _, t := range []string{"valgrind", "callgrind_control"} {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("%s not found: the instruction count runs the gateway and ReverseProxy under valgrind's callgrind (hack/install-deps.sh installs the valgrind package): %w", t, err)
		}
	}
	return nil
}

// cgProc is a process under callgrind.
type cgProc struct {
	*proc
	out   string // the dump files' prefix: out.1, out.2, ...
	dumps int
}

func (o *options) startCallgrind(name, addr, bin string, args ...string) (*cgProc, error) {
	out := filepath.Join(o.logDir, name+".callgrind")
	vg := append([]string{"--tool=callgrind", "--callgrind-out-file=" + out, bin}, args...)
	p, err := startEnv(name, o.logDir, addr, instrEnv, "valgrind", vg...)
	if err != nil {
		return nil, err
	}
	return &cgProc{proc: p, out: out}, nil
}

// control runs callgrind_control with arg against the process.
func (c *cgProc) control(arg string) error {
	out, err := exec.Command("callgrind_control", arg, strconv.Itoa(c.Pid())).CombinedOutput()
	if err != nil {
		return fmt.Errorf("callgrind_control %s %s: %w: %s", arg, c.Name, err, out)
	}
	return nil
}

// dump writes the counts since the last dump (or zero) and reads them back.
func (c *cgProc) dump(label string) (instrCount, error) {
	if err := c.control("--dump=" + label); err != nil {
		return instrCount{}, err
	}
	c.dumps++
	path := fmt.Sprintf("%s.%d", c.out, c.dumps)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		// callgrind writes the file whole before callgrind_control returns; the wait covers a
		// slow file system.
		if f, err := os.Open(path); err == nil {
			defer f.Close()
			return parseCallgrind(f)
		}
		if time.Now().After(deadline) {
			return instrCount{}, fmt.Errorf("%s: no callgrind dump %s", c.Name, path)
		}
	}
}

// instrRunOnce starts ReverseProxy and the gateway under callgrind against agent, streams both
// phases through both at once, and returns the instructions per chunk.
func (o *options) instrRunOnce(ctx context.Context, run int, agent string) (instrRun, error) {
	c := o.instr
	self, err := os.Executable()
	if err != nil {
		return instrRun{}, err
	}
	rpAddr, err := benchproc.FreeAddr()
	if err != nil {
		return instrRun{}, err
	}
	rp, err := o.startCallgrind(fmt.Sprintf("instr%d-reverseproxy", run), rpAddr, self,
		"proxy", "-policy="+policyRR, "-listen="+rpAddr, "-backends="+agent)
	if err != nil {
		return instrRun{}, err
	}
	defer rp.Stop()
	gwAddr, err := benchproc.FreeAddr()
	if err != nil {
		return instrRun{}, err
	}
	admin, err := benchproc.FreeAddr()
	if err != nil {
		return instrRun{}, err
	}
	// The metrics scrape is per pod per second, not per chunk: off here (its cost per second is
	// the gateway's, whatever the chunk rate).
	rr := strings.NewReplacer("{listen}", gwAddr, "{admin}", admin, "{backends}", agent)
	gwArgs := append(strings.Fields(rr.Replace(o.gatewayArgs)), "--scrape-interval=0")
	gw, err := o.startCallgrind(fmt.Sprintf("instr%d-gateway", run), gwAddr, o.gatewayBin, gwArgs...)
	if err != nil {
		return instrRun{}, err
	}
	defer gw.Stop()
	if err := rp.WaitTCP(2 * time.Minute); err != nil {
		return instrRun{}, err
	}
	if err := gw.WaitHTTP(rr.Replace(o.readyURL), 3*time.Minute); err != nil {
		return instrRun{}, err
	}
	urls := []string{"http://" + rpAddr + "/v1/chat/completions", "http://" + gwAddr + "/v1/chat/completions"}
	procs := []*cgProc{rp, gw}
	if _, err := instrPhase(ctx, urls, 3, c.short, 0); err != nil { // warm-up: connections, first-touch
		return instrRun{}, err
	}
	for _, p := range procs {
		if err := p.control("--zero"); err != nil {
			return instrRun{}, err
		}
	}
	// An idle phase of the same wall time first: the timer-driven work, for the cost per request.
	if _, err := instrPhase(ctx, urls, 0, c.short, c.phaseTime()); err != nil {
		return instrRun{}, err
	}
	var idle [2]instrCount
	for i, p := range procs {
		if idle[i], err = p.dump("idle"); err != nil {
			return instrRun{}, err
		}
	}
	var counts [2][2]instrCount // phase, process
	var chunks [2][2]int
	for ph, tokens := range []int{c.short, c.long} {
		n, err := instrPhase(ctx, urls, c.requests, tokens, c.phaseTime())
		if err != nil {
			return instrRun{}, err
		}
		for i, p := range procs {
			chunks[ph][i] = n[i]
			if counts[ph][i], err = p.dump(fmt.Sprintf("%d-tokens", tokens)); err != nil {
				return instrRun{}, err
			}
		}
	}
	r := instrRun{load: benchproc.LoadAvg(), chunks: chunks[1][0] - chunks[0][0]}
	if chunks[1][1]-chunks[0][1] != r.chunks || r.chunks <= 0 {
		return r, fmt.Errorf("chunks between the phases differ: ReverseProxy %d, gateway %d", r.chunks, chunks[1][1]-chunks[0][1])
	}
	r.rp, r.rpFns = perChunk(counts[0][0], counts[1][0], r.chunks)
	r.gw, r.gwFns = perChunk(counts[0][1], counts[1][1], r.chunks)
	r.rpReq, r.rpReqFns = perRequest(idle[0], counts[0][0], r.rp, r.rpFns, chunks[0][0], c.requests)
	r.gwReq, r.gwReqFns = perRequest(idle[1], counts[0][1], r.gw, r.gwFns, chunks[0][1], c.requests)
	return r, nil
}

// instrPhase streams requests completions of tokens through each URL (one at a time per URL, the
// URLs at once), then waits until pad has passed since its start; it returns the content chunks
// each URL delivered.
func instrPhase(ctx context.Context, urls []string, requests, tokens int, pad time.Duration) ([]int, error) {
	begin := time.Now()
	chunks := make([]int, len(urls))
	errs := make([]error, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() {
			hc := newClient(1)
			defer hc.CloseIdleConnections()
			for seq := range requests {
				r := stream(ctx, hc, u, overheadBody(i, seq, tokens))
				if r.err != nil {
					errs[i] = fmt.Errorf("%s: %w", u, r.err)
					return
				}
				chunks[i] += r.chunks
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if took := time.Since(begin); pad > 0 && took > pad {
		return nil, fmt.Errorf("a %d-token phase took %s, more than its padded %s: timer-driven work would not cancel (raise -instr-phase)", tokens, took.Round(time.Millisecond), pad)
	}
	if pad > 0 {
		select {
		case <-time.After(pad - time.Since(begin)):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return chunks, nil
}

// instrDiff is where the gateway's instructions per chunk differ from ReverseProxy's, by
// function, largest first; functions within min of each other are summed into one "rest" row.
type instrDiffRow struct {
	fn     string
	gw, rp float64
}

func instrDiff(r instrRun, min float64) []instrDiffRow {
	seen := map[string]bool{}
	var rows []instrDiffRow
	rest := instrDiffRow{fn: fmt.Sprintf("(all functions differing by less than %g)", min)}
	for _, m := range []map[string]float64{r.gwFns, r.rpFns} {
		for f := range m {
			if seen[f] {
				continue
			}
			seen[f] = true
			row := instrDiffRow{fn: f, gw: r.gwFns[f], rp: r.rpFns[f]}
			if d := row.gw - row.rp; d < min && d > -min {
				rest.gw += row.gw
				rest.rp += row.rp
				continue
			}
			rows = append(rows, row)
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		di, dj := rows[i].gw-rows[i].rp, rows[j].gw-rows[j].rp
		if di != dj {
			return di > dj
		}
		return rows[i].fn < rows[j].fn
	})
	return append(rows, rest)
}

// instrGroup names the part of a process a function belongs to.
func instrGroup(fn string) string {
	switch {
	case strings.HasPrefix(fn, "github.com/neuronetes/"):
		return "project code"
	case strings.HasPrefix(fn, "net/http") || strings.HasPrefix(fn, "net/textproto"):
		return "net/http"
	case strings.HasPrefix(fn, "runtime") || strings.HasPrefix(fn, "internal/") || strings.HasPrefix(fn, "sync") ||
		strings.HasPrefix(fn, "time.") || !strings.Contains(fn, "."):
		return "Go runtime, poller, timers, assembly"
	}
	return "other library code"
}

// instrVerdict is the instruction count's outcome: the judged ratio is the largest of the runs'.
type instrVerdict struct {
	runs  []instrRun
	ratio float64
}

// runInstructions counts the instructions per chunk c.runs times and prints each run, the spread
// and, for the first run, what the difference is made of.
func (o *options) runInstructions(ctx context.Context, w io.Writer) (instrVerdict, error) {
	c := o.instr
	var v instrVerdict
	if err := callgrindTools(); err != nil {
		return v, err
	}
	if o.gatewayBin == "" {
		return v, errNoGateway
	}
	agents, err := startAgents(ctx, o.agentBin, o.logDir, "instr", 1, agentFlags{
		slots: 4, prefillRate: 1e9, decodeRate: c.rate, kvTokens: 1 << 22, blockSize: 16})
	if err != nil {
		return v, err
	}
	defer agents.stop()
	fmt.Fprintf(w, "\n== instructions per streamed chunk (valgrind callgrind, user space, %s): %d requests of %d then of %d tokens at %g tokens/s through ReverseProxy and the gateway at once, one agent, phases padded to %s; per chunk = (long phase - short phase) / the chunks between\n",
		strings.Join(instrEnv, " "), c.requests, c.short, c.long, c.rate, c.phaseTime())
	for run := 1; run <= c.runs; run++ {
		r, err := o.instrRunOnce(ctx, run, agents.urls()[0])
		if err != nil {
			return v, fmt.Errorf("instruction count run %d: %w", run, err)
		}
		fmt.Fprintf(w, "  run %d: gateway %.0f, ReverseProxy %.0f instructions per chunk (%d chunks each): %.3fx  load %s\n",
			run, r.gw, r.rp, r.chunks, r.ratio(), r.load)
		fmt.Fprintf(w, "  run %d per request (context): gateway %.0f, ReverseProxy %.0f instructions (%+.0f)\n", run, r.gwReq, r.rpReq, r.gwReq-r.rpReq)
		v.runs = append(v.runs, r)
		v.ratio = max(v.ratio, r.ratio())
	}
	if len(v.runs) > 1 {
		lo, hi := v.runs[0].ratio(), v.runs[0].ratio()
		for _, r := range v.runs[1:] {
			lo, hi = min(lo, r.ratio()), max(hi, r.ratio())
		}
		fmt.Fprintf(w, "  runs agree within %.2f%% (ratios %.3fx-%.3fx); judged: the largest\n", 100*(hi-lo)/lo, lo, hi)
	}
	printInstrDiff(w, v.runs[0])
	printReqDiff(w, v.runs[0])
	return v, nil
}

// printInstrDiff writes what the gateway's instructions per chunk are made of against
// ReverseProxy's: by part of the process, then by function (self instructions; inclusive costs
// are not used because goroutine switches break callgrind's call stacks).
func printInstrDiff(w io.Writer, r instrRun) {
	groups := map[string][2]float64{}
	for _, row := range instrDiff(r, 0) {
		g := groups[instrGroup(row.fn)]
		groups[instrGroup(row.fn)] = [2]float64{g[0] + row.gw, g[1] + row.rp}
	}
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "  run 1 by part (instructions per chunk): ")
	for i, g := range names {
		if i > 0 {
			fmt.Fprint(w, "; ")
		}
		fmt.Fprintf(w, "%s gateway %.0f vs ReverseProxy %.0f (%+.0f)", g, groups[g][0], groups[g][1], groups[g][0]-groups[g][1])
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  run 1 by function, self instructions per chunk, gateway - ReverseProxy (|difference| >= 15):\n")
	for _, row := range instrDiff(r, 15) {
		fmt.Fprintf(w, "    %+8.0f  %8.0f %8.0f  %s\n", row.gw-row.rp, row.gw, row.rp, row.fn)
	}
}

// instrWhy names the functions that make up most of the gateway's excess over ReverseProxy.
func instrWhy(r instrRun) string {
	var parts []string
	for _, row := range instrDiff(r, 15) {
		if d := row.gw - row.rp; d > 0 && len(parts) < 6 {
			parts = append(parts, fmt.Sprintf("%s %+.0f", row.fn, d))
		}
	}
	return fmt.Sprintf("the gateway runs %+.0f instructions per chunk more than ReverseProxy; largest excess by function: %s",
		r.gw-r.rp, strings.Join(parts, ", "))
}

// printReqDiff writes what the gateway's instructions per request are made of against
// ReverseProxy's, by function (self instructions; context for the added TTFT, not judged).
func printReqDiff(w io.Writer, r instrRun) {
	const minDiff, maxRows = 2000, 30
	fmt.Fprintf(w, "  run 1 per request = (short phase - its chunks x per chunk - an idle phase as long) / requests: gateway %.0f, ReverseProxy %.0f (%+.0f)\n",
		r.gwReq, r.rpReq, r.gwReq-r.rpReq)
	fmt.Fprintf(w, "  run 1 by function, self instructions per request, gateway - ReverseProxy (|difference| >= %d, the largest %d):\n", minDiff, maxRows)
	rows := instrDiff(instrRun{gwFns: r.gwReqFns, rpFns: r.rpReqFns}, minDiff)
	rest := rows[len(rows)-1]
	rows = rows[:len(rows)-1]
	sort.SliceStable(rows, func(i, j int) bool { return abs(rows[i].gw-rows[i].rp) > abs(rows[j].gw-rows[j].rp) })
	for i, row := range rows {
		if i == maxRows {
			break
		}
		fmt.Fprintf(w, "    %+9.0f  %9.0f %9.0f  %s\n", row.gw-row.rp, row.gw, row.rp, row.fn)
	}
	if len(rows) > maxRows {
		fmt.Fprintf(w, "    (%d more functions differing by %d or more)\n", len(rows)-maxRows, minDiff)
	}
	fmt.Fprintf(w, "    %+9.0f  %9.0f %9.0f  %s\n", rest.gw-rest.rp, rest.gw, rest.rp, rest.fn)
}
