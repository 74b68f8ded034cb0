package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/neuronetes/neuronetes/dispatcher/queue"
	"github.com/neuronetes/neuronetes/internal/benchproc"
)

// env is the processes every round shares.
type env struct {
	agents  benchproc.Group
	urls    []string
	gateway *benchproc.Proc
	gwURL   string
	redis   *benchproc.Proc
	redisAt string
}

func startEnv(c config) (_ *env, err error) {
	e := &env{}
	defer func() {
		if err != nil {
			e.stop()
		}
	}()
	var backends []string
	for i := 0; i < c.agents; i++ {
		addr, err := benchproc.FreeAddr()
		if err != nil {
			return nil, err
		}
		p, err := benchproc.Start(fmt.Sprintf("agent-%d", i), c.logdir, addr, nil, c.agentBin, "--listen="+addr, "--model=bench",
			fmt.Sprintf("--max-running=%d", c.slots), fmt.Sprintf("--token-rate=%g", c.tokenRate), fmt.Sprintf("--default-max-tokens=%d", c.tokens),
			"--ttft-base=20ms", "--prefill-rate=1e9", "--drain-timeout=1s")
		if err != nil {
			return nil, err
		}
		e.agents = append(e.agents, p)
		e.urls = append(e.urls, "http://"+addr)
		backends = append(backends, "http://"+addr)
	}
	if e.redis, err = startRedis(c); err != nil {
		return nil, err
	}
	e.redisAt = e.redis.Addr
	gwAddr, err := benchproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	gwAdmin, err := benchproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	if e.gateway, err = benchproc.Start("gateway", c.logdir, gwAddr, nil, c.gatewayBin, "--backends="+strings.Join(backends, ","), "--listen="+gwAddr,
		"--admin-listen="+gwAdmin, "--drain-delay=0s"); err != nil {
		return nil, err
	}
	e.gwURL = "http://" + gwAddr
	for _, a := range e.agents {
		if err := a.WaitHTTP("http://"+a.Addr+"/readyz", 30*time.Second); err != nil {
			return nil, err
		}
	}
	if err := e.gateway.WaitHTTP("http://"+gwAdmin+"/readyz", 30*time.Second); err != nil {
		return nil, err
	}
	if err := e.redis.WaitTCP(10 * time.Second); err != nil {
		return nil, err
	}
	return e, nil
}

// startRedis runs redis-server on a free loopback port (its Addr), without persistence.
func startRedis(c config) (*benchproc.Proc, error) {
	addr, err := benchproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := strings.Cut(addr, ":")
	return benchproc.Start("redis", c.logdir, addr, nil, c.redisBin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", c.logdir)
}

// stop stops every process of e that was started (SIGTERM, then SIGKILL after a grace).
func (e *env) stop() {
	append(append(benchproc.Group{}, e.agents...), e.gateway, e.redis).Stop()
}

// cpuTime is the user plus system CPU time p has used so far.
func cpuTime(p *benchproc.Proc) time.Duration {
	return time.Duration(p.CPUSeconds() * float64(time.Second))
}

// arrivals records results by message id.
type arrivals struct {
	mu    sync.Mutex
	sent  map[string]time.Time
	got   map[string]time.Time
	first time.Time
	last  time.Time
	wake  chan struct{}
}

func (a *arrivals) add(id string) {
	now := time.Now()
	a.mu.Lock()
	if _, dup := a.got[id]; !dup && strings.HasPrefix(id, "m-") {
		a.got[id] = now
		if a.first.IsZero() {
			a.first = now
		}
		a.last = now
	}
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *arrivals) wait(n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		a.mu.Lock()
		got := len(a.got)
		a.mu.Unlock()
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d results within %s", got, n, timeout)
		}
		select {
		case <-a.wake:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// measure runs one column in one round: drain a backlog, then a paced latency phase.
func (e *env) measure(c config, b broker, col, round string, rate float64) (sample, error) {
	q, err := b.prepare(round)
	if err != nil {
		return sample{}, fmt.Errorf("prepare: %w", err)
	}
	dest := destOf(b.provider(), "out", round)
	a := &arrivals{sent: map[string]time.Time{}, got: map[string]time.Time{}, wake: make(chan struct{}, 1)}
	stopCollect, err := b.collect(dest, a.add)
	if err != nil {
		return sample{}, err
	}
	defer stopCollect()
	for i := 0; i < c.messages; i++ {
		if err := b.produce(round, i); err != nil {
			return sample{}, err
		}
	}
	if err := b.flush(); err != nil {
		return sample{}, err
	}
	stop, cpu, failures, err := e.consume(c, b, col, round, q, dest)
	if err != nil {
		return sample{}, err
	}
	defer stop()
	cpu0 := cpu()
	if err := a.wait(c.messages, 5*time.Minute); err != nil {
		return sample{}, fmt.Errorf("backlog: %w", err)
	}
	s := sample{cpuPerMessage: (cpu() - cpu0) / time.Duration(c.messages)}
	a.mu.Lock()
	s.rate = float64(c.messages-1) / a.last.Sub(a.first).Seconds()
	a.mu.Unlock()
	n := int(rate * c.latencySeconds.Seconds())
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	for i := c.messages; i < c.messages+n; i++ {
		<-tick.C
		a.mu.Lock()
		a.sent[fmt.Sprintf("m-%d", i)] = time.Now()
		a.mu.Unlock()
		if err := b.produce(round, i); err != nil {
			tick.Stop()
			return sample{}, err
		}
		if b.provider() == "nats" && i%16 == 0 {
			_ = b.flush()
		}
	}
	tick.Stop()
	_ = b.flush()
	if err := a.wait(c.messages+n, 2*time.Minute); err != nil {
		return sample{}, fmt.Errorf("latency phase: %w", err)
	}
	var lat []time.Duration
	a.mu.Lock()
	for id, t0 := range a.sent {
		lat = append(lat, a.got[id].Sub(t0))
	}
	a.mu.Unlock()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	s.p50, s.p99 = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
	s.failures = failures()
	return s, nil
}

// consume starts the column's consumer; it returns its stop function, the CPU time of the
// processes the column adds, and its failure count.
func (e *env) consume(c config, b broker, col, round, q, dest string) (func(), func() time.Duration, func() int64, error) {
	inFlight := c.prefetch * c.agents
	if col != "dispatcher" {
		targets := e.urls
		cpu := func() time.Duration { return 0 }
		if col == "bare-via-gateway" {
			targets = []string{e.gwURL}
			cpu = func() time.Duration { return cpuTime(e.gateway) }
		}
		ctx, cancel := context.WithCancel(context.Background())
		cons, err := b.queueProvider().Consumer(ctx, queue.Options{URL: b.url(), Queue: q, Group: "bench-" + round, Member: "bare", AckWait: 30 * time.Second})
		if err != nil {
			cancel()
			return nil, nil, nil, err
		}
		pub, err := b.queueProvider().Publisher(ctx, b.url())
		if err != nil {
			cancel()
			return nil, nil, nil, err
		}
		bc := &bare{targets: targets, model: "bench", inFlight: inFlight, out: dest, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}}
		done := make(chan struct{})
		go func() { bc.run(ctx, cons, pub); close(done) }()
		return func() { cancel(); <-done; _ = cons.Close() }, cpu, bc.failures.Load, nil
	}
	file := filepath.Join(c.logdir, "binding-"+round+".yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(`apiVersion: neuronetes.io/v1alpha1
kind: ToolBinding
metadata: {name: bench-%s, namespace: bench}
spec:
  type: queue
  agentPoolRef: {name: pool}
  queueConfig:
    provider: %s
    queueName: %s
    prefetchCount: %d
    dispatch: {responseQueue: %s, deadLetterQueue: %s, maxRetries: 3, initialBackoff: 100ms, maxBackoff: 1s, timeout: 30s}
`, round, b.provider(), q, c.prefetch, dest, strings.Replace(dest, "out", "dead", 1))), 0o600); err != nil {
		return nil, nil, nil, err
	}
	admin, err := benchproc.FreeAddr()
	if err != nil {
		return nil, nil, nil, err
	}
	d, err := benchproc.Start("dispatcher-"+round, c.logdir, "", nil, c.dispatcherBin, "--static-bindings="+file, "--static-model=bench",
		fmt.Sprintf("--static-pool-replicas=%d", c.agents), "--gateway-url="+e.gwURL, "--redis-addr="+e.redisAt, "--redis-prefix=b:"+round+":",
		urlFlag(b.provider())+"="+b.url(), "--admin-listen="+admin, "--tool-listen=", "--member=bench", "--drain-timeout=0s", "--audit-log=", "-v=2")
	if err != nil {
		return nil, nil, nil, err
	}
	if err := d.WaitHTTP("http://"+admin+"/readyz", 30*time.Second); err != nil {
		d.Stop()
		return nil, nil, nil, err
	}
	cpu := func() time.Duration { return cpuTime(d) + cpuTime(e.gateway) + cpuTime(e.redis) }
	failures := func() int64 { return scrapeRetries("http://" + admin + "/metrics") }
	return d.Stop, cpu, failures, nil
}

// scrapeRetries reads the dispatcher's retried counter.
func scrapeRetries(url string) int64 {
	resp, err := http.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var sum int64
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "neuronetes_dispatch_messages_total{") && strings.Contains(line, `event="retried"`) {
			var v float64
			fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%g", &v)
			sum += int64(v)
		}
	}
	return sum
}
