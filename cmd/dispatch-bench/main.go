// Command dispatch-bench measures the dispatcher (hack/bench.d/80-dispatch.sh): messages/s and
// the latency a message spends from its publish to its result, through the dispatcher and the
// gateway, against a bare consumer that uses the same broker clients and calls the pool's pods
// directly, and against the same bare consumer calling through the gateway (the gateway's share).
// Everything runs on loopback: demo agents, the gateway (static-backends mode), the dispatcher
// (static mode) and redis-server as processes; nats-server (embedded) and kfake in this process.
// The verdict is printed last; the exit status is 1 when a target is missed, 2 when nothing
// could be measured.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"
)

type config struct {
	agentBin, gatewayBin, dispatcherBin, redisBin, logdir string
	providers                                             string
	messages, rounds, agents, slots, tokens, prefetch     int
	tokenRate, latencyLoad, target                        float64
	latencySeconds                                        time.Duration
}

func main() {
	c := config{}
	flag.StringVar(&c.agentBin, "agent-bin", "", "demo-agent binary (required)")
	flag.StringVar(&c.gatewayBin, "gateway-bin", "", "gateway binary (required)")
	flag.StringVar(&c.dispatcherBin, "dispatcher-bin", "", "dispatcher binary (required)")
	flag.StringVar(&c.redisBin, "redis-bin", "redis-server", "redis-server binary")
	flag.StringVar(&c.logdir, "logdir", os.TempDir(), "directory of the processes' logs")
	flag.StringVar(&c.providers, "providers", "nats,kafka", "providers to measure")
	flag.IntVar(&c.messages, "messages", 1500, "backlog drained per round (throughput)")
	flag.IntVar(&c.rounds, "rounds", 3, "rounds per column (interleaved; medians reported)")
	flag.IntVar(&c.agents, "agents", 4, "demo agents (pool replicas)")
	flag.IntVar(&c.slots, "slots", 8, "batch slots per agent (--max-running)")
	flag.IntVar(&c.tokens, "tokens", 32, "tokens per answer")
	flag.Float64Var(&c.tokenRate, "token-rate", 200, "decode tokens/s per sequence")
	flag.IntVar(&c.prefetch, "prefetch", 8, "prefetchCount (messages in flight per agent, for every column)")
	flag.Float64Var(&c.latencyLoad, "latency-load", 0.5, "offered load of the latency phase, as a share of the agents' capacity")
	flag.DurationVar(&c.latencySeconds, "latency-duration", 8*time.Second, "length of the latency phase")
	flag.Float64Var(&c.target, "target", 0.8, "dispatcher throughput target as a share of the bare consumer's")
	fault := flag.Int("fault", 0, "run the process-level fault drill with this many messages per provider instead of the benchmark (needs -ledger-bin)")
	ledgerBin := flag.String("ledger-bin", "", "e2e/cmd/ledger-agent binary (the fault drill's agents)")
	flag.Parse()
	for name, v := range map[string]string{"-agent-bin": c.agentBin, "-gateway-bin": c.gatewayBin, "-dispatcher-bin": c.dispatcherBin} {
		if v == "" {
			fmt.Printf("VERDICT: NOT MEASURED: %s is required\n", name)
			os.Exit(2)
		}
	}
	if _, err := exec.LookPath(c.redisBin); err != nil {
		fmt.Printf("VERDICT: NOT MEASURED: %s not found (Debian package redis-server)\n", c.redisBin)
		os.Exit(2)
	}
	if *fault > 0 {
		if *ledgerBin == "" {
			fmt.Println("VERDICT: NOT MEASURED: -fault needs -ledger-bin")
			os.Exit(2)
		}
		os.Exit(faultDrill(c, *ledgerBin, *fault))
	}
	os.Exit(run(c))
}

// sample is one column's measurement in one round.
type sample struct {
	rate          float64 // messages/s draining the backlog
	p50, p99      time.Duration
	cpuPerMessage time.Duration // of the added processes (dispatcher, gateway, redis)
	failures      int64
}

var columns = []string{"bare", "bare-via-gateway", "dispatcher"}

func run(c config) int {
	env, err := startEnv(c)
	if err != nil {
		fmt.Printf("VERDICT: NOT MEASURED: %v\n", err)
		return 2
	}
	defer env.stop()
	capacity := float64(c.agents*c.slots) / (0.02 + float64(c.tokens)/c.tokenRate)
	fmt.Printf("agents %d x %d slots, %d tokens at %.0f tokens/s (capacity about %.0f messages/s); backlog %d messages per round, %d rounds; latency phase at %.0f messages/s for %s\n",
		c.agents, c.slots, c.tokens, c.tokenRate, capacity, c.messages, c.rounds, capacity*c.latencyLoad, c.latencySeconds)
	verdicts := []string{}
	ok := true
	for _, p := range strings.Split(c.providers, ",") {
		b, closeB, err := newBroker(p, c.logdir)
		if err != nil {
			fmt.Printf("VERDICT: NOT MEASURED: %s: %v\n", p, err)
			return 2
		}
		res := map[string][]sample{}
		for r := 0; r < c.rounds; r++ {
			for _, col := range columns {
				s, err := env.measure(c, b, col, fmt.Sprintf("%s-%s-%d", p, strings.ReplaceAll(col, "-", ""), r), capacity*c.latencyLoad)
				if err != nil {
					closeB()
					fmt.Printf("VERDICT: NOT MEASURED: %s %s round %d: %v\n", p, col, r, err)
					return 2
				}
				fmt.Printf("  %-6s %-17s round %d: %7.1f msg/s  latency p50 %7.1f ms  p99 %7.1f ms  cpu/msg %6.2f ms  failures %d\n",
					p, col, r, s.rate, ms(s.p50), ms(s.p99), ms(s.cpuPerMessage), s.failures)
				res[col] = append(res[col], s)
			}
		}
		closeB()
		base, disp, gw := median(res["bare"]), median(res["dispatcher"]), median(res["bare-via-gateway"])
		fmt.Printf("%s (medians of %d rounds)\n", p, c.rounds)
		fmt.Printf("  %-17s %9s %8s %12s %12s %12s %12s\n", "column", "msg/s", "ratio", "p50 ms", "p99 ms", "added p50", "added p99")
		for _, x := range []struct {
			name string
			s    sample
		}{{"bare", base}, {"bare-via-gateway", gw}, {"dispatcher", disp}} {
			fmt.Printf("  %-17s %9.1f %8.3f %12.1f %12.1f %12.1f %12.1f\n", x.name, x.s.rate, x.s.rate/base.rate, ms(x.s.p50), ms(x.s.p99), ms(x.s.p50-base.p50), ms(x.s.p99-base.p99))
		}
		ratio := disp.rate / base.rate
		pass := ratio >= c.target
		ok = ok && pass
		verdicts = append(verdicts, fmt.Sprintf("%s %.2fx (target >= %.2fx) %s", p, ratio, c.target, map[bool]string{true: "met", false: "MISSED"}[pass]))
	}
	if ok {
		fmt.Printf("VERDICT: PASS: dispatcher throughput vs the bare consumer: %s\n", strings.Join(verdicts, "; "))
		return 0
	}
	fmt.Printf("VERDICT: FAIL: dispatcher throughput vs the bare consumer: %s\n", strings.Join(verdicts, "; "))
	return 1
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// median takes each field's median over the rounds.
func median(ss []sample) sample {
	pick := func(f func(sample) float64) float64 {
		v := make([]float64, 0, len(ss))
		for _, s := range ss {
			v = append(v, f(s))
		}
		sort.Float64s(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return sample{
		rate:          pick(func(s sample) float64 { return s.rate }),
		p50:           time.Duration(pick(func(s sample) float64 { return float64(s.p50) })),
		p99:           time.Duration(pick(func(s sample) float64 { return float64(s.p99) })),
		cpuPerMessage: time.Duration(pick(func(s sample) float64 { return float64(s.cpuPerMessage) })),
	}
}

func newBroker(p, dir string) (broker, func(), error) {
	switch p {
	case "nats":
		d, err := os.MkdirTemp(dir, "nats")
		if err != nil {
			return nil, nil, err
		}
		b, err := newNATS(d)
		if err != nil {
			return nil, nil, err
		}
		return b, b.close, nil
	case "kafka":
		b, err := newKafka()
		if err != nil {
			return nil, nil, err
		}
		return b, b.close, nil
	}
	return nil, nil, fmt.Errorf("provider %q: nats or kafka", p)
}
