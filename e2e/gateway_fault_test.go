package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// One of the two gateway replicas is killed (SIGKILL, no grace) while 200 streams run through
// the Service: every stream the other replica serves completes, and sessions pinned before the
// kill keep their pods afterwards (the pin table is shared through Redis).
func (g *gweEnv) killReplica(t *testing.T) {
	// One new connection per request, so the Service spreads them over both replicas.
	hc := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	pins := map[string]string{}
	for i := 0; i < 20; i++ {
		s := fmt.Sprintf("kill-%d", i)
		r, err := g.sendErr(context.Background(), hc, gweKeyLoad, s, false, 2, "pin me")
		if err != nil || r.status != 200 {
			t.Fatalf("pin %s: %v %d", s, err, r.status)
		}
		pins[s] = r.header.Get("X-Neuronetes-Pod")
	}
	// The example RoutingPolicy admits 8 requests per endpoint per replica (32 in flight in all)
	// and queues 64 per replica, so 200 concurrent streams need the agents' own limit (64 running
	// each) as the gateway's: raise it for this drill. The informers of both replicas apply a
	// policy change within a second; the in-flight count below (over 32) shows it took effect.
	g.e.Kubectl(t, "-n", g.ns, "patch", "routingpolicy", "chat", "--type=merge", "-p",
		`{"spec":{"admission":{"maxInFlightPerEndpoint":64,"maxQueue":256,"queueTimeout":"60s"}}}`)
	time.Sleep(3 * time.Second)
	reps := g.replicas(t)
	if len(reps) != 2 {
		t.Fatalf("%d gateway replicas", len(reps))
	}
	victim, survivor := reps[0].Name, reps[1].Name

	type result struct {
		gateway string
		done    bool
		err     error
	}
	results := make([]result, 200)
	var started atomic.Int32
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			r, err := g.sendErr(context.Background(), hc, gweKeyLoad, fmt.Sprintf("stream-%d", i), true, 60, "stream through the fault",
				"")
			results[i] = result{r.header.Get("X-Neuronetes-Gateway"), r.done, err}
		})
	}
	Eventually(t, time.Minute, "streams under way", func() (bool, error) {
		n := 0.0
		for _, ip := range g.replicaIPs(t) {
			v, _ := gweMetric("http://"+ip+":9090/metrics", "neuronetes_gateway_inflight_requests", map[string]string{"pool": g.ns + "/chat"})
			n += v
		}
		started.Store(int32(n))
		return n >= 50, fmt.Errorf("%v in flight", n)
	})
	zero := int64(0)
	if err := g.e.Kube.CoreV1().Pods(g.ns).Delete(context.Background(), victim, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s with %d streams in flight", victim, started.Load())
	wg.Wait()
	bySurvivor, completed, onVictim := 0, 0, 0
	for i, r := range results {
		switch r.gateway {
		case survivor:
			bySurvivor++
			if !r.done || r.err != nil {
				t.Errorf("stream %d on the surviving replica did not complete: done %v err %v", i, r.done, r.err)
			} else {
				completed++
			}
		case victim:
			onVictim++
		}
	}
	t.Logf("streams: %d on the survivor (%d completed), %d on the killed replica, %d refused before any header",
		bySurvivor, completed, onVictim, len(results)-bySurvivor-onVictim)
	if bySurvivor == 0 || onVictim == 0 {
		t.Fatalf("the Service did not spread the streams over both replicas (survivor %d, victim %d)", bySurvivor, onVictim)
	}
	for s, pod := range pins {
		r, err := g.sendErr(context.Background(), hc, gweKeyLoad, s, false, 2, "still pinned?")
		if err != nil || r.status != 200 {
			t.Fatalf("session %s after the kill: %v %d", s, err, r.status)
		}
		if got := r.header.Get("X-Neuronetes-Pod"); got != pod || r.header.Get("X-Neuronetes-Pin") != "held" {
			t.Errorf("session %s: pod %s (pin %s) after the kill, %s before", s, got, r.header.Get("X-Neuronetes-Pin"), pod)
		}
	}
}

// With Redis stopped, requests are still served (pins fall back to load balancing, quotas fail
// open by default).
func (g *gweEnv) redisDown(t *testing.T) {
	g.redis.Kill()
	for i := 0; i < 10; i++ {
		r := g.send(t, gweKeyA, fmt.Sprintf("no-redis-%d", i), true, 4, "served without Redis?")
		if r.status != 200 || !r.done {
			t.Fatalf("request %d with Redis stopped: %d %s", i, r.status, r.body)
		}
	}
	errs := 0.0
	for _, ip := range g.replicaIPs(t) {
		v, _ := gweMetric("http://"+ip+":9090/metrics", "neuronetes_gateway_store_errors_total", nil)
		errs += v
	}
	if errs == 0 {
		t.Error("no store error counted with Redis stopped")
	}
}
