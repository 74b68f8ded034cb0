package e2e

// The daily budget through the gateway (issue 29's acceptance, docs/autoscaling.md "Cost and
// spot"): a pool priced by its node, with seed 001's three budget actions and
// dynamicModelSelection, in front of a fallback pool of a smaller model; the day's spend first
// passes costThreshold, then dailyBudget. The budget is set from the spend the controller reports,
// so each stage starts when the test says, not after a wall-clock wait.

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// budgetPoolsYAML: pool "big" (model demo-llm) with seed 001's budget actions and a fallback to
// pool "small" (model demo-llm-small); both on the real node, which the test prices. Arguments:
// the sidecar's Redis address, the demo agent's image.
const budgetPoolsYAML = `apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: big}
spec:
  modelRef: {name: demo-llm}
  sidecar: {redisAddr: "%[1]s", keysSecretName: sidecar-keys}
  template:
    spec:
      containers:
      - name: agent
        image: %[2]s
        imagePullPolicy: Never
        args: ["--listen=:8000", "--model=demo-llm", "--token-rate=200", "--ttft-base=5ms"]
        ports: [{name: http, containerPort: 8000}]
        readinessProbe: {httpGet: {path: /readyz, port: 8000}, periodSeconds: 1}
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: small}
spec:
  modelRef: {name: demo-llm-small}
  sidecar: {redisAddr: "%[1]s", keysSecretName: sidecar-keys}
  template:
    spec:
      containers:
      - name: agent
        image: %[2]s
        imagePullPolicy: Never
        args: ["--listen=:8000", "--model=demo-llm-small", "--token-rate=200", "--ttft-base=5ms"]
        ports: [{name: http, containerPort: 8000}]
        readinessProbe: {httpGet: {path: /readyz, port: 8000}, periodSeconds: 1}
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: small}
spec:
  agentClassRef: {name: small}
  replicas: 1
  prewarmPercent: 0
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: big}
spec:
  agentClassRef: {name: big}
  replicas: 2
  minReplicas: 1
  maxReplicas: 2
  prewarmPercent: 0
  autoscaling:
    metrics: [{type: concurrent-sessions, target: "100"}]
    behavior: {scaleDown: {stabilizationWindow: 1h}}
    costConstraints:
      dailyBudget: 1000.0
      onBudgetExceeded: [scale-to-min, use-fallback-model, enable-spot]
      fallbackPoolRef: {name: small}
      optimization:
        dynamicModelSelection: {enabled: true, costThreshold: 0.1}
`

// budgetTurn is one non-streamed turn as the client saw it.
type budgetTurn struct {
	model   string // X-Neuronetes-Model
	context int    // usage.context_tokens: the prompt the agent saw, memory included
}

// TestBudgetFallbackThroughGateway: conversation A starts on pool big. Once the day's spend passes
// costThreshold of the budget, a new conversation B goes to the fallback pool small (the gateway
// names demo-llm-small in X-Neuronetes-Model) while A stays on big. Once the budget is spent, the
// three actions fire in spec order, each with its Event (scale-to-min, use-fallback-model widening
// the fallback to every conversation, enable-spot); A moves to small with its history (the
// fallback's sidecar reads the same session memory) and big is held at minReplicas. A controller
// restart keeps the day's spend: nothing clears.
func TestBudgetFallbackThroughGateway(t *testing.T) {
	e := requireEnv(t)
	ctrlInstallCRDs(t, e)
	rs := sidecarRedis(t)
	sidecarImg := e.Image(t, "sidecar", "./cmd/sidecar")
	agentImg := e.Image(t, "demo-agent", "./cmd/demo-agent")
	ns := e.Namespace(t, "cost-budget")
	priceNode(t, e, e.NodeName, "36")
	sidecarKeys(t, e, ns)
	ctl := startController(t, e, ns, sidecarImg, "", "--autoscaler=true", "--autoscaler-sync-period=2s")
	applyAPIKeyTenant(t, e, ns, gatewayAPIKey)
	e.Apply(t, ns, fmt.Sprintf(budgetPoolsYAML, rs.Addr, agentImg))
	g := startGateway(t, e, ns)
	waitPoolReady(t, e, ns, "small", procLogs(ctl), 1, 3*time.Minute)
	waitPoolReady(t, e, ns, "big", procLogs(ctl), 2, 3*time.Minute)

	turn := func(session string, n int) budgetTurn {
		t.Helper()
		r := g.chat(t, "demo-llm", session, fmt.Sprintf("%s turn %d", session, n), false, nil)
		if r.status != 200 {
			t.Fatalf("%s turn %d: %d %s", session, n, r.status, r.body)
		}
		var u struct {
			Usage struct {
				Context int `json:"context_tokens"`
			} `json:"usage"`
		}
		_ = json.Unmarshal([]byte(r.body), &u)
		return budgetTurn{model: r.header.Get("X-Neuronetes-Model"), context: u.Usage.Context}
	}
	convA, convB := "budget-a-"+ns, "budget-b-"+ns
	Eventually(t, time.Minute, "the gateway routes demo-llm to big", func() (bool, error) {
		r := g.chat(t, "demo-llm", "", "probe", false, nil)
		return r.status == 200 && r.header.Get("X-Neuronetes-Model") == "demo-llm", fmt.Errorf("%d %q", r.status, r.header.Get("X-Neuronetes-Model"))
	})
	a1 := turn(convA, 1)
	if a1.model != "demo-llm" {
		t.Fatalf("conversation A's first turn served by %q, want demo-llm", a1.model)
	}

	// Stage 1: the spend is past costThreshold (0.1) of the budget and under the budget.
	spent := spentOf(t, e, ns)
	setBudget(t, e, ns, 4*spent+0.02)
	waitCost(t, e, ns, ctl, "cost threshold: new conversations fall back", func(cs *nnv1.CostStatus) bool {
		return cs.Fallback != nil && cs.Fallback.Scope == nnv1.FallbackNewSessions && !condTrue(cs, nnv1.CostBudgetExceeded)
	})
	Eventually(t, 30*time.Second, "the gateway sends a new conversation to small", func() (bool, error) {
		b := turn(convB, 1)
		return b.model == "demo-llm-small", fmt.Errorf("conversation B served by %q", b.model)
	})
	if a2 := turn(convA, 2); a2.model != "demo-llm" {
		t.Errorf("conversation A (pinned to big) moved to %q before the budget was spent", a2.model)
	}
	if cs := costStatus(t, e, ns, "big"); condTrue(cs, nnv1.CostBudgetExceeded) {
		t.Fatalf("the budget was spent before stage 2 (status.cost %+v): raise the stage-1 margin", cs)
	}

	// Stage 2: the budget is spent.
	setBudget(t, e, ns, spentOf(t, e, ns)/2)
	waitCost(t, e, ns, ctl, "budget spent: every action", func(cs *nnv1.CostStatus) bool {
		return condTrue(cs, nnv1.CostBudgetExceeded) && condTrue(cs, nnv1.CostScaledToMin) && condTrue(cs, nnv1.CostSpotEnabled) &&
			cs.Fallback != nil && cs.Fallback.Scope == nnv1.FallbackAllSessions && cs.SpotPercent != nil
	})
	checkBudgetEvents(t, e, ns)
	Eventually(t, 30*time.Second, "conversation A moves to small with its history", func() (bool, error) {
		a := turn(convA, 3)
		if a.model != "demo-llm-small" {
			return false, fmt.Errorf("conversation A served by %q", a.model)
		}
		if a.context <= a1.context {
			t.Errorf("conversation A on small saw a prompt of %d tokens, not more than its first turn's %d: its history is missing", a.context, a1.context)
		}
		return true, nil
	})
	waitPoolReady(t, e, ns, "big", procLogs(ctl), 1, time.Minute)

	// A controller restart keeps the day's spend.
	before := spentOf(t, e, ns)
	ctl.kill()
	ctl.start()
	time.Sleep(6 * time.Second) // three sync periods of the new process
	cs := costStatus(t, e, ns, "big")
	after, _ := strconv.ParseFloat(string(cs.SpentToday), 64)
	if after < before || !condTrue(cs, nnv1.CostBudgetExceeded) {
		t.Errorf("after a controller restart: spent %v (before %v), status.cost %+v", after, before, cs)
	}
	if ev := budgetEvents(t, e, ns); strings.Contains(ev, "CostActionCleared") {
		t.Errorf("a controller restart cleared a budget action:\n%s", ev)
	}
}

// priceNode sets the node's price annotation for the test.
func priceNode(t *testing.T, e *Env, node, price string) {
	t.Helper()
	e.Kubectl(t, "annotate", "--overwrite", "node", node, "neuronetes.io/price-per-hour="+price)
	t.Cleanup(func() { e.Kubectl(t, "annotate", "node", node, "neuronetes.io/price-per-hour-") })
}

// spentOf is pool big's status.cost.spentToday, once the controller has priced it.
func spentOf(t *testing.T, e *Env, ns string) float64 {
	t.Helper()
	var v float64
	Eventually(t, time.Minute, "pool big's spend", func() (bool, error) {
		cs := costStatus(t, e, ns, "big")
		if cs == nil || cs.SpentToday == "" {
			return false, fmt.Errorf("no status.cost.spentToday")
		}
		var err error
		v, err = strconv.ParseFloat(string(cs.SpentToday), 64)
		return err == nil && v > 0, fmt.Errorf("spentToday %q: %v", cs.SpentToday, err)
	})
	return v
}

func setBudget(t *testing.T, e *Env, ns string, dollars float64) {
	t.Helper()
	e.Kubectl(t, "-n", ns, "patch", "agentpool/big", "--type=merge", "-p",
		fmt.Sprintf(`{"spec":{"autoscaling":{"costConstraints":{"dailyBudget":%.4f}}}}`, dollars))
}

func waitCost(t *testing.T, e *Env, ns string, ctl *ctrlProc, what string, ok func(*nnv1.CostStatus) bool) {
	t.Helper()
	waitPool(t, e, ns, "big", procLogs(ctl), time.Minute, what, func() (bool, error) {
		cs := costStatus(t, e, ns, "big")
		return cs != nil && ok(cs), fmt.Errorf("status.cost %+v", cs)
	})
}

// budgetEvents lists pool big's Events, oldest first (an Event's name is the object's and the hex
// nanosecond of its creation), "reason message" per line.
func budgetEvents(t *testing.T, e *Env, ns string) string {
	t.Helper()
	return e.Kubectl(t, "-n", ns, "get", "events", "--sort-by=.metadata.name",
		"--field-selector", "involvedObject.name=big,involvedObject.kind=AgentPool",
		"-o", `jsonpath={range .items[*]}{.reason} {.message}{"\n"}{end}`)
}

// checkBudgetEvents: the threshold fired the fallback for new conversations; then the budget and
// its actions fired, in spec order, each with its own Event.
func checkBudgetEvents(t *testing.T, e *Env, ns string) {
	t.Helper()
	want := []string{"FallbackActive: ", "BudgetExceeded: ", "ScaledToMin: ", "FallbackActive: ", "SpotEnabled: "}
	var got []string
	Eventually(t, 30*time.Second, "the budget Events", func() (bool, error) {
		got = got[:0]
		for _, l := range strings.Split(budgetEvents(t, e, ns), "\n") {
			if m, ok := strings.CutPrefix(l, "CostActionFired "); ok {
				got = append(got, m)
			}
		}
		return len(got) >= len(want), fmt.Errorf("%d CostActionFired events: %q", len(got), got)
	})
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("CostActionFired event %d is %q, want %q...; all: %q", i, got[i], w, got)
		}
	}
	if !strings.Contains(got[0], "NewSessions") || !strings.Contains(got[3], "AllSessions") {
		t.Errorf("the fallback events do not name the scopes (NewSessions, then AllSessions): %q", got)
	}
}
