package e2e

// Rollout e2e (docs/rollouts.md): the gateway (host process, cluster mode) splits conversations
// between two demo-agent pools by an AgentRollout; the controller (host process) reads the
// gateway's metrics and moves the rollout.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var rolloutGVR = schema.GroupVersionResource{Group: "neuronetes.io", Version: "v1alpha1", Resource: "agentrollouts"}

func rolloutStatus(t *testing.T, e *Env, ns, name string) map[string]any {
	t.Helper()
	u, err := e.Dynamic.Resource(rolloutGVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get rollout: %v", err)
	}
	st, _, _ := unstructured.NestedMap(u.Object, "status")
	return st
}

// convTracker drives conversations through the gateway and checks none changes pool.
type convTracker struct {
	t     *testing.T
	g     *gwProc
	model string
	extra map[string]any
	mu    sync.Mutex
	pool  map[string]string // conversation -> pool that served its first turn
	next  int
	// flips lists conversations that changed pool (must stay empty, except after a rollback for
	// conversations that were on the canary).
	flips []flip
	codes map[int]int
	tools int // tool calls the client received
}

// flip is a conversation served by another pool than the one that served its first turn.
type flip struct{ conv, from, to string }

func (f flip) String() string { return fmt.Sprintf("%s: %s -> %s", f.conv, f.from, f.to) }

func newTracker(t *testing.T, g *gwProc, model string, extra map[string]any) *convTracker {
	return &convTracker{t: t, g: g, model: model, extra: extra, pool: map[string]string{}, codes: map[int]int{}}
}

// round sends one turn of every conversation in convs in parallel and starts fresh ones; it
// returns the pools that served the fresh ones.
func (c *convTracker) round(convs []string, fresh int) []string {
	c.mu.Lock()
	var news []string
	for i := 0; i < fresh; i++ {
		c.next++
		news = append(news, fmt.Sprintf("conv-%d", c.next))
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	var newPools []string
	for _, conv := range append(append([]string{}, convs...), news...) {
		wg.Add(1)
		go func(conv string) {
			defer wg.Done()
			r := c.g.chat(c.t, c.model, conv, "hello from "+conv, false, c.extra)
			pool := r.header.Get("X-Neuronetes-Pool")
			c.mu.Lock()
			defer c.mu.Unlock()
			c.codes[r.status]++
			c.tools += r.toolCalls
			if pool == "" {
				return
			}
			if prev, ok := c.pool[conv]; !ok {
				c.pool[conv] = pool
				for _, n := range news {
					if n == conv {
						newPools = append(newPools, pool)
					}
				}
			} else if prev != pool {
				c.flips = append(c.flips, flip{conv: conv, from: prev, to: pool})
			}
		}(conv)
	}
	wg.Wait()
	return newPools
}

func (c *convTracker) known() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.pool))
	for k := range c.pool {
		out = append(out, k)
	}
	return out
}

// driveUntil runs rounds (the known conversations plus fresh new ones) until done, and returns
// the index in flips where the last round's flips start. Flips before it happened before done
// held: every request of a round was answered before done was read. The last round's may have
// been routed after the change done waits for; the caller decides which of them it allows.
func (c *convTracker) driveUntil(timeout time.Duration, fresh int, done func() bool) int {
	deadline := time.Now().Add(timeout)
	if done() {
		return len(c.flips)
	}
	for {
		if time.Now().After(deadline) {
			c.t.Fatalf("not done after %s; responses by status %v", timeout, c.codes)
		}
		known := c.known()
		if len(known) > 30 {
			known = known[len(known)-30:]
		}
		last := len(c.flips)
		c.round(known, fresh)
		if done() {
			return last
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRolloutRollsBackErroringCanary: a canary failing half its requests is rolled back by the
// gate (status, condition, Warning Event); afterwards every new conversation goes to stable;
// before it no conversation changed pool.
func TestRolloutRollsBackErroringCanary(t *testing.T) {
	e, ns, g := guardEnv(t, "rollout-rb")
	img := e.Image(t, "demo-agent", "./cmd/demo-agent")
	e.Apply(t, ns, poolManifest("stable", "chat", img, 1, "--ttft-base=5ms", "--token-rate=500", "--max-running=16")+"---\n"+
		poolManifest("canary", "chat", img, 1, "--ttft-base=5ms", "--token-rate=500", "--max-running=16", "--fail-rate=0.5", "--fail-mode=status")+"---\n"+`
apiVersion: neuronetes.io/v1alpha1
kind: AgentRollout
metadata: {name: chat}
spec:
  stablePool: {name: stable}
  canaryPool: {name: canary}
  steps: [{weight: 50, pause: 1s}, {weight: 100}]
  gate: {minSamples: 20, interval: 2s, maxErrorRateIncrease: 0.05}
`)
	guardPoolReady(t, e, ns, "stable", 1)
	guardPoolReady(t, e, ns, "canary", 1)
	tr := newTracker(t, g, "chat", nil)
	last := tr.driveUntil(4*time.Minute, 4, func() bool { return rolloutStatus(t, e, ns, "chat")["phase"] == "RolledBack" })
	if last > 0 {
		t.Fatalf("conversations changed variant before the rollback: %v", tr.flips[:last])
	}
	// In the round during which the rollback landed, the gateway moves canary conversations to
	// stable once it sees it; any other change is a defect.
	for _, f := range tr.flips[last:] {
		if !strings.HasSuffix(f.from, "/canary") || !strings.HasSuffix(f.to, "/stable") {
			t.Fatalf("conversation changed variant in the round of the rollback, not from canary to stable: %v", f)
		}
	}
	t.Logf("%d canary conversations moved to stable in the round of the rollback", len(tr.flips)-last)
	st := rolloutStatus(t, e, ns, "chat")
	if w, _ := st["canaryWeight"].(int64); w != 0 {
		t.Fatalf("canary weight after rollback: %v", st)
	}
	conds := fmt.Sprint(st["conditions"])
	if !strings.Contains(conds, "RolledBack") || !strings.Contains(conds, "errorRate") {
		t.Fatalf("conditions: %s", conds)
	}
	evs := e.Kubectl(t, "get", "events", "-n", ns, "--field-selector", "involvedObject.kind=AgentRollout,reason=RolledBack", "-o", "name")
	if strings.TrimSpace(evs) == "" {
		t.Fatal("no RolledBack Event")
	}
	// Every new conversation now goes to stable (the gateway sees the status within a watch).
	Eventually(t, 30*time.Second, "new conversations on stable", func() (bool, error) {
		pools := tr.round(nil, 20)
		for _, p := range pools {
			if !strings.HasSuffix(p, "/stable") {
				return false, fmt.Errorf("a new conversation went to %s", p)
			}
		}
		return len(pools) == 20, fmt.Errorf("%d of 20 served", len(pools))
	})
	t.Logf("responses by status %v; %d conversations", tr.codes, len(tr.known()))
}

// TestRolloutShadowThenPromotion: a shadow step copies stable requests to the canary, whose tool
// calls never reach the client (counted as suppressed); then a healthy canary is promoted through
// every step, no conversation ever changes pool, and after promotion new conversations go to the
// canary.
func TestRolloutShadowThenPromotion(t *testing.T) {
	e, ns, g := guardEnv(t, "rollout-ok")
	img := e.Image(t, "demo-agent", "./cmd/demo-agent")
	e.Apply(t, ns, poolManifest("stable", "chat", img, 1, "--ttft-base=5ms", "--token-rate=500", "--max-running=16")+"---\n"+
		poolManifest("canary", "chat", img, 1, "--ttft-base=5ms", "--token-rate=500", "--max-running=16", "--tool-calls")+"---\n"+`
apiVersion: neuronetes.io/v1alpha1
kind: AgentRollout
metadata: {name: chat}
spec:
  stablePool: {name: stable}
  canaryPool: {name: canary}
  steps:
    - {weight: 0, mirror: 100, pause: 20s}
    - {weight: 30, pause: 20s}
    - {weight: 60, pause: 2s}
    - {weight: 100}
  gate: {minSamples: 15, interval: 2s, maxTTFTRatio: 3, maxErrorRateIncrease: 0.05}
  drain: {timeout: 40s}
`)
	guardPoolReady(t, e, ns, "stable", 1)
	guardPoolReady(t, e, ns, "canary", 1)
	tools := map[string]any{"tools": []any{map[string]any{"type": "function", "function": map[string]any{
		"name": "send_email", "description": "sends an e-mail", "parameters": map[string]any{"type": "object"}}}}}
	tr := newTracker(t, g, "chat", tools)

	// Shadow step: every client answer comes from stable, without tool calls; the canary gets
	// the copies and its tool calls are counted as suppressed.
	Eventually(t, time.Minute, "shadow copies with suppressed tool calls", func() (bool, error) {
		tr.round(tr.known(), 4)
		if st := rolloutStatus(t, e, ns, "chat"); fmt.Sprint(st["currentStep"]) != "0" {
			t.Fatalf("the shadow step (pause 20s) ended before its copies were seen: %v", st)
		}
		shadow := g.metric(t, "neuronetes_rollout_requests_total", map[string]string{"variant": "canary", "mode": "shadow"})
		suppressed := g.metric(t, "neuronetes_rollout_shadow_tool_calls_suppressed_total", nil)
		return shadow > 0 && suppressed > 0, fmt.Errorf("shadow samples %v, suppressed tool calls %v", shadow, suppressed)
	})
	if tr.tools != 0 {
		t.Fatalf("the client received %d tool calls during the shadow step", tr.tools)
	}
	for conv, p := range tr.pool {
		if !strings.HasSuffix(p, "/stable") {
			t.Fatalf("conversation %s was served by %s during the shadow step", conv, p)
		}
	}
	// A pause holds the weighted step (no restart at step 0), and no conversation changes variant.
	tr.driveUntil(2*time.Minute, 4, func() bool { return fmt.Sprint(rolloutStatus(t, e, ns, "chat")["currentStep"]) == "1" })
	e.Kubectl(t, "patch", "agentrollout", "chat", "-n", ns, "--type=merge", "-p", `{"spec":{"paused":true}}`)
	held := rolloutStatus(t, e, ns, "chat")["stepID"]
	Eventually(t, 30*time.Second, "rollout paused on step 1", func() (bool, error) {
		st := rolloutStatus(t, e, ns, "chat")
		return st["phase"] == "Paused", fmt.Errorf("status %v", st)
	})
	tr.round(tr.known(), 4)
	time.Sleep(5 * time.Second) // two gate intervals
	if st := rolloutStatus(t, e, ns, "chat"); st["phase"] != "Paused" || fmt.Sprint(st["currentStep"]) != "1" || st["stepID"] != held {
		t.Fatalf("the pause did not hold step 1 (%v): %v", held, st)
	}
	e.Kubectl(t, "patch", "agentrollout", "chat", "-n", ns, "--type=merge", "-p", `{"spec":{"paused":false}}`)
	tr.driveUntil(5*time.Minute, 4, func() bool { return rolloutStatus(t, e, ns, "chat")["phase"] == "Promoted" })
	if len(tr.flips) > 0 {
		t.Fatalf("conversations changed variant: %v", tr.flips)
	}
	onCanary := 0
	for _, p := range tr.pool {
		if strings.HasSuffix(p, "/canary") {
			onCanary++
		}
	}
	if onCanary == 0 {
		t.Fatal("no conversation reached the canary during the weighted steps")
	}
	evs := e.Kubectl(t, "get", "events", "-n", ns, "--field-selector", "involvedObject.kind=AgentRollout,reason=Promoted", "-o", "name")
	if strings.TrimSpace(evs) == "" {
		t.Fatal("no Promoted Event")
	}
	Eventually(t, 30*time.Second, "new conversations on the canary", func() (bool, error) {
		pools := tr.round(nil, 10)
		for _, p := range pools {
			if !strings.HasSuffix(p, "/canary") {
				return false, fmt.Errorf("a new conversation went to %s", p)
			}
		}
		return len(pools) == 10, nil
	})
	if len(tr.flips) > 0 {
		t.Fatalf("conversations changed variant after promotion: %v", tr.flips)
	}
	// Drain: spec.drain.timeout after the promotion every request goes to the canary, and the
	// stable pool is scaled to 0.
	Eventually(t, 2*time.Minute, "rollout drained", func() (bool, error) {
		st := rolloutStatus(t, e, ns, "chat")
		return st["drained"] == true, fmt.Errorf("status %v", st)
	})
	var onStable []string
	for conv, p := range tr.pool {
		if strings.HasSuffix(p, "/stable") {
			onStable = append(onStable, conv)
		}
	}
	Eventually(t, 30*time.Second, "drained conversations on the canary", func() (bool, error) {
		tr.flips = nil
		tr.round(onStable, 0)
		return len(tr.flips) == len(onStable), fmt.Errorf("%d of %d stable conversations moved: %v", len(tr.flips), len(onStable), tr.flips)
	})
	for _, f := range tr.flips {
		if !strings.HasSuffix(f.to, "/canary") {
			t.Fatalf("a drained conversation went to %s", f.to)
		}
	}
	if r := e.Kubectl(t, "get", "agentpool", "stable", "-n", ns, "-o", "jsonpath={.spec.replicas}/{.spec.minReplicas}"); strings.TrimSpace(r) != "0/0" {
		t.Fatalf("drained stable pool replicas/minReplicas %q, want 0/0", r)
	}
	t.Logf("responses by status %v; %d conversations, %d on the canary, %d moved by the drain", tr.codes, len(tr.pool), onCanary, len(onStable))
}
