package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/internal/benchproc"
)

// faultDrill is the process-level fault drill (-fault): per provider, two dispatcher processes
// and three ledger agents work through n messages; once a fifth are answered one dispatcher and
// one agent get SIGKILL. It checks what e2e TestDispatcherFault checks on the cluster.
func faultDrill(c config, ledgerBin string, n int) int {
	e := &env{}
	defer e.stop()
	var err error
	if e.redis, err = startRedis(c); err != nil {
		fmt.Printf("VERDICT: NOT MEASURED: %v\n", err)
		return 2
	}
	e.redisAt = e.redis.Addr
	if err := e.redis.WaitTCP(10 * time.Second); err != nil {
		fmt.Printf("VERDICT: NOT MEASURED: %v\n", err)
		return 2
	}
	ok := true
	var lines []string
	for _, p := range strings.Split(c.providers, ",") {
		line, pass, err := faultOne(c, e, ledgerBin, p, n)
		if err != nil {
			fmt.Printf("VERDICT: NOT MEASURED: %s: %v\n", p, err)
			return 2
		}
		fmt.Println(line)
		lines = append(lines, fmt.Sprintf("%s %s", p, map[bool]string{true: "held", false: "BROKEN"}[pass]))
		ok = ok && pass
	}
	if ok {
		fmt.Printf("VERDICT: PASS: fault drill: %s\n", strings.Join(lines, "; "))
		return 0
	}
	fmt.Printf("VERDICT: FAIL: fault drill: %s\n", strings.Join(lines, "; "))
	return 1
}

func faultOne(c config, e *env, ledgerBin, p string, n int) (string, bool, error) {
	var b broker
	var closeB func()
	var err error
	if p == "redis" {
		rb := newRedisBroker(e.redisAt)
		b, closeB = rb, rb.close
	} else if b, closeB, err = newBroker(p, c.logdir); err != nil {
		return "", false, err
	}
	defer closeB()
	round := "fault-" + p
	ledger := "ledger:" + p
	var agents []*benchproc.Proc
	var backends []string
	for i := 0; i < 3; i++ {
		addr, err := benchproc.FreeAddr()
		if err != nil {
			return "", false, err
		}
		a, err := benchproc.Start(fmt.Sprintf("%s-agent-%d", p, i), c.logdir, addr, nil, ledgerBin, "--listen="+addr, "--redis="+e.redisAt, "--ledger="+ledger,
			"--latency=150ms", fmt.Sprintf("--name=%s-agent-%d", p, i))
		if err != nil {
			return "", false, err
		}
		defer a.Stop()
		agents = append(agents, a)
		backends = append(backends, "http://"+addr)
		if err := a.WaitHTTP("http://"+addr+"/readyz", 30*time.Second); err != nil {
			return "", false, err
		}
	}
	gwAddr, err := benchproc.FreeAddr()
	if err != nil {
		return "", false, err
	}
	gwAdmin, err := benchproc.FreeAddr()
	if err != nil {
		return "", false, err
	}
	gw, err := benchproc.Start(p+"-gateway", c.logdir, gwAddr, nil, c.gatewayBin, "--backends="+strings.Join(backends, ","), "--listen="+gwAddr, "--admin-listen="+gwAdmin, "--drain-delay=0s")
	if err != nil {
		return "", false, err
	}
	defer gw.Stop()
	if err := gw.WaitHTTP("http://"+gwAdmin+"/readyz", 30*time.Second); err != nil {
		return "", false, err
	}
	q, err := b.prepare(round)
	if err != nil {
		return "", false, err
	}
	results, dead := destOf(p, "out", round), destOf(p, "dead", round)
	file := filepath.Join(c.logdir, "binding-"+round+".yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(`apiVersion: neuronetes.io/v1alpha1
kind: ToolBinding
metadata: {name: %[1]s, namespace: drill}
spec:
  type: queue
  agentPoolRef: {name: pool}
  queueConfig:
    provider: %[2]s
    queueName: %[3]s
    prefetchCount: 8
    dispatch: {responseQueue: %[4]s, deadLetterQueue: %[5]s, maxRetries: 5, initialBackoff: 200ms, maxBackoff: 2s, timeout: 20s}
`, round, p, q, results, dead)), 0o600); err != nil {
		return "", false, err
	}
	disp := map[string]*benchproc.Proc{}
	for _, m := range []string{"d-a", "d-b"} {
		admin, err := benchproc.FreeAddr()
		if err != nil {
			return "", false, err
		}
		d, err := benchproc.Start(p+"-dispatcher-"+m, c.logdir, "", nil, c.dispatcherBin, "--static-bindings="+file, "--static-model=bench", "--static-pool-replicas=3",
			"--gateway-url=http://"+gwAddr, "--redis-addr="+e.redisAt, "--redis-prefix=drill:"+p+":", urlFlag(p)+"="+b.url(),
			"--admin-listen="+admin, "--tool-listen=", "--member="+m, "--status-period=1s", "--audit-log=", "-v=2")
		if err != nil {
			return "", false, err
		}
		defer d.Stop()
		disp[m] = d
		if err := d.WaitHTTP("http://"+admin+"/readyz", 30*time.Second); err != nil {
			return "", false, err
		}
	}
	var mu sync.Mutex
	got, deadGot := map[string]int{}, map[string]int{}
	stop, err := b.collect(results, func(id string) { mu.Lock(); got[id]++; mu.Unlock() })
	if err != nil {
		return "", false, err
	}
	defer stop()
	stopDead, err := b.collect(dead, func(id string) { mu.Lock(); deadGot[id]++; mu.Unlock() })
	if err != nil {
		return "", false, err
	}
	defer stopDead()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(got) + len(deadGot) }
	for i := 0; i < n; i++ {
		if err := b.produce(round, i); err != nil {
			return "", false, err
		}
	}
	if err := b.flush(); err != nil {
		return "", false, err
	}
	t0 := time.Now()
	for count() < n/5 {
		if time.Since(t0) > 5*time.Minute {
			return "", false, fmt.Errorf("only %d results after 5 min", count())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// SIGKILL, not SIGTERM: the drill is a crash, with no drain.
	disp["d-a"].Kill()
	killAt := time.Now()
	agents[0].Kill()
	podAt := time.Now()
	victim := p + "-agent-0"
	for count() < n {
		if time.Since(t0) > 15*time.Minute {
			return "", false, fmt.Errorf("%d outcomes after 15 min", count())
		}
		time.Sleep(time.Second)
	}
	took := time.Since(t0)
	time.Sleep(3 * time.Second)
	return judgeFault(p, n, got, deadGot, e.redisAt, ledger, victim, killAt, podAt, took, &mu)
}

func judgeFault(p string, n int, got, perDead map[string]int, redisAddr, ledger, victim string, killAt, podAt time.Time, took time.Duration, mu *sync.Mutex) (string, bool, error) {
	mu.Lock()
	defer mu.Unlock()
	bad, doubledResults, deadTotal := 0, 0, 0
	for _, c := range perDead {
		deadTotal += c
	}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("m-%d", i)
		if got[id] > 1 {
			doubledResults++
		}
		if min(got[id], 1)+perDead[id] != 1 || (got[id] > 0 && perDead[id] > 0) {
			bad++
		}
	}
	rc := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rc.Close()
	log, err := rc.LRange(context.Background(), ledger+":log", 0, -1).Result()
	if err != nil {
		return "", false, err
	}
	type completion struct {
		pod, member string
		at          time.Time
	}
	byID := map[string][]completion{}
	for _, line := range log {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		ms, _ := strconv.ParseInt(f[3], 10, 64)
		byID[f[0]] = append(byID[f[0]], completion{pod: f[1], member: f[2], at: time.UnixMilli(ms)})
	}
	cutDispatcher, cutPod, unexplained, twice := 0, 0, 0, 0
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		cs := byID[id]
		if len(cs) < 2 || got[id] == 0 {
			continue
		}
		twice++
		for _, c := range cs[:len(cs)-1] {
			switch {
			case c.member == "d-a" && c.at.After(killAt.Add(-3*time.Second)) && !c.at.After(killAt):
				cutDispatcher++
			case c.pod == victim && c.at.After(podAt.Add(-3*time.Second)) && !c.at.After(podAt.Add(time.Second)):
				cutPod++
			default:
				unexplained++
				fmt.Printf("  %s %s: processed again after a completion not cut off by a kill: %+v\n", p, id, cs)
			}
		}
	}
	pass := bad == 0 && doubledResults == 0 && unexplained == 0
	line := fmt.Sprintf("%-5s %d messages in %s (%.0f/s): %d results, %d dead letters, %d without exactly one outcome, %d results published twice; agents completed %d messages twice, cut off by a kill: %d for the killed dispatcher, %d on the killed agent, %d not explained",
		p, n, took.Round(time.Second), float64(n)/took.Seconds(), len(got), deadTotal, bad, doubledResults, twice, cutDispatcher, cutPod, unexplained)
	return line, pass, nil
}
