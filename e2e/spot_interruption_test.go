package e2e

// Spot interruption under load (issue 29's acceptance, docs/autoscaling.md "Interruptions"): two
// real nodes (the cluster's second node, e2e/cluster/node2.go), the first labelled Karpenter spot,
// the second on-demand; a pool whose one serving pod (the demo agent with the injected sidecar,
// session memory in Redis) runs on the spot node; the gateway (a host process) in front; 50
// streamed conversations; then the spot node gets Karpenter's disruption taint.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/e2e/cluster"
	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/sessionkey"
)

// spotConversations is the number of concurrent streamed conversations.
const spotConversations = 50

// spotInterruptionTimeout is the pool's onInterruption.timeout.
const spotInterruptionTimeout = 60 * time.Second

// spotPoolYAML: one serving pod, spot-eligible (maxSpotPercent 100), on the test's two nodes; the
// sidecar keeps each conversation in Redis; the drain grace (20s) is under the timeout.
const spotPoolYAML = `apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: chat}
spec:
  modelRef: {name: demo-llm}
  sidecar: {redisAddr: "%[1]s", keysSecretName: sidecar-keys}
  template:
    spec:
      terminationGracePeriodSeconds: 30
      nodeSelector: {neuronetes.io/e2e-spot: "%[3]s"}
      tolerations: [{key: neuronetes.io/second-node, operator: Exists, effect: NoSchedule}]
      containers:
      - name: agent
        image: %[2]s
        imagePullPolicy: Never
        args: ["--listen=:8000", "--model=demo-llm", "--token-rate=10", "--ttft-base=5ms", "--max-running=128"]
        ports: [{name: http, containerPort: 8000}]
        readinessProbe: {httpGet: {path: /readyz, port: 8000}, periodSeconds: 1}
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: chat}
spec:
  agentClassRef: {name: chat}
  replicas: 1
  minReplicas: 1
  maxReplicas: 2
  prewarmPercent: 0
  drainGracePeriodSeconds: 20
  autoscaling:
    metrics: [{type: concurrent-sessions, target: "100"}]
    spotStrategy:
      enabled: true
      maxSpotPercent: 100
      onInterruption: {action: migrate-to-on-demand, timeout: 60s}
`

// spotTurn is one streamed turn as the client saw it.
type spotTurn struct {
	n          int // turn number in its conversation, from 1
	start, end time.Time
	status     int
	done       bool // the stream ended with [DONE]
	pod, pin   string
	context    int // usage.context_tokens: the whole prompt the agent saw, memory included
	err        error
}

// ok reports a turn that was served whole.
func (s spotTurn) ok() bool {
	return s.err == nil && s.status == http.StatusOK && s.done && s.context > 0 && s.pod != ""
}

func spotContent(conv, n int) string {
	return fmt.Sprintf("conversation %d, turn %d: please go on", conv, n)
}

// streamTurn sends turn n of conversation conv through the gateway, streamed, with usage.
func streamTurn(hc *http.Client, g *gwProc, session string, conv, n int) (r spotTurn) {
	r = spotTurn{n: n, start: time.Now()}
	defer func() { r.end = time.Now() }()
	body, _ := json.Marshal(map[string]any{"model": "demo-llm", "stream": true, "max_tokens": 8,
		"stream_options": map[string]any{"include_usage": true},
		"messages":       []map[string]string{{"role": "user", "content": spotContent(conv, n)}}})
	req, _ := http.NewRequest(http.MethodPost, "http://"+g.api+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+g.key)
	req.Header.Set("X-Session-Id", session)
	resp, err := hc.Do(req)
	if err != nil {
		r.err = err
		return r
	}
	defer resp.Body.Close()
	r.status, r.pod, r.pin = resp.StatusCode, resp.Header.Get("X-Neuronetes-Pod"), resp.Header.Get("X-Neuronetes-Pin")
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if d == "[DONE]" {
			r.done = true
			break
		}
		var c struct {
			Usage *struct {
				Context int `json:"context_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal([]byte(d), &c) == nil && c.Usage != nil {
			r.context = c.Usage.Context
		}
	}
	if err := sc.Err(); err != nil && r.err == nil {
		r.err = err
	}
	if r.err == nil && !r.ok() {
		r.err = fmt.Errorf("status %d, done %v, context %d, pod %q", r.status, r.done, r.context, r.pod)
	}
	return r
}

// spotLoad runs the conversations' turns and records them.
type spotLoad struct {
	g        *gwProc
	hc       *http.Client
	sessions []string
	mu       sync.Mutex
	turns    [][]spotTurn // per conversation, in order
}

// next sends the next turn of every conversation at once and returns them.
func (l *spotLoad) next() []spotTurn {
	out := make([]spotTurn, len(l.sessions))
	var wg sync.WaitGroup
	for i := range l.sessions {
		wg.Add(1)
		go func() { defer wg.Done(); out[i] = l.turn(i) }()
	}
	wg.Wait()
	return out
}

func (l *spotLoad) turn(i int) spotTurn {
	l.mu.Lock()
	n := len(l.turns[i]) + 1
	l.mu.Unlock()
	r := streamTurn(l.hc, l.g, l.sessions[i], i, n)
	l.mu.Lock()
	l.turns[i] = append(l.turns[i], r)
	l.mu.Unlock()
	return r
}

// run keeps every conversation talking (a pause of 0.5 s to 1.5 s, random, then one turn) until
// stop closes. The random pauses spread the turns out, so that at any moment about half the
// conversations have one streaming.
func (l *spotLoad) run(stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := range l.sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(500*time.Millisecond + mrand.N(time.Second)):
				}
				l.turn(i)
			}
		}()
	}
	return &wg
}

// TestSpotInterruptionMigratesConversations: the pool's pod serves 50 streamed conversations on
// the spot node; the node gets karpenter.sh/disrupted:NoSchedule while every conversation keeps
// talking (a turn every 0.5-1.5 s plus its 0.8 s stream). The controller starts the replacement on the on-demand node and
// drains the interrupted pod within onInterruption.timeout; no turn fails (requests in flight
// during the drain included), every conversation's next turn is served by the replacement, and
// the replacement's sidecar holds each conversation's whole history (every user turn, in order);
// each turn's prompt (usage.context_tokens) is longer than the last one's, so no turn lost its
// history.
func TestSpotInterruptionMigratesConversations(t *testing.T) {
	e := requireEnv(t)
	ctrlInstallCRDs(t, e)
	rs := sidecarRedis(t)
	sidecarImg := e.Image(t, "sidecar", "./cmd/sidecar")
	agentImg := e.Image(t, "demo-agent", "./cmd/demo-agent")
	if took := e.requireSecondNode(t); took > 0 {
		t.Logf("second node started in %s", took.Round(10*time.Millisecond))
	}
	ns := e.Namespace(t, "spot-int")
	ctx := context.Background()
	spotNode, odNode := e.NodeName, cluster.SecondNodeName
	labelSpotNodes(t, e, ns, spotNode, odNode)
	sidecarKeys(t, e, ns)
	keyFile := filepath.Join(t.TempDir(), "session-key")
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(secret)), 0o600); err != nil {
		t.Fatal(err)
	}
	scoper, err := sessionkey.Load(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ctl := startController(t, e, ns, sidecarImg, "--http-addr=0.0.0.0:7070")
	e.Apply(t, ns, fmt.Sprintf(spotPoolYAML, rs.Addr, agentImg, ns))
	applyAPIKeyTenant(t, e, ns, gatewayAPIKey)
	g := startGateway(t, e, ns, "--session-key-file="+keyFile)

	var victim corev1.Pod
	waitPool(t, e, ns, "chat", procLogs(ctl), 3*time.Minute, "the pool's pod Ready on the spot node", func() (bool, error) {
		pods := poolPods(t, e, ns, "chat")["serving"]
		if len(pods) == 1 && readyCount(pods) == 1 {
			victim = pods[0]
			return true, nil
		}
		return false, fmt.Errorf("serving pods %d, ready %d", len(pods), readyCount(pods))
	})
	if victim.Spec.NodeName != spotNode || victim.Labels[nnv1.CapacityLabel] != "spot" {
		t.Fatalf("pod %s on %s with capacity %q; want the spot node %s", victim.Name, victim.Spec.NodeName, victim.Labels[nnv1.CapacityLabel], spotNode)
	}

	l := &spotLoad{g: g, hc: &http.Client{Timeout: time.Minute}, turns: make([][]spotTurn, spotConversations)}
	for i := range spotConversations {
		l.sessions = append(l.sessions, fmt.Sprintf("spot-%s-%d", ns, i))
	}
	Eventually(t, time.Minute, "the gateway routes demo-llm", func() (bool, error) {
		r := streamTurn(l.hc, g, "probe-"+ns, -1, 1)
		return r.ok(), r.err
	})
	for i, r := range l.next() {
		if !r.ok() || r.pod != victim.Name {
			t.Fatalf("conversation %d turn 1: pod %q (want %s): %v", i, r.pod, victim.Name, r.err)
		}
	}

	stop := make(chan struct{})
	wg := l.run(stop)
	time.Sleep(2 * time.Second)
	taintNode(t, e, spotNode, true)
	t.Cleanup(func() { taintNode(t, e, spotNode, false) })
	notice := time.Now()
	var drainStart, gone time.Time
	for gone.IsZero() && time.Since(notice) < spotInterruptionTimeout+30*time.Second {
		p, err := e.Kube.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			gone = time.Now()
		case err == nil && (p.DeletionTimestamp != nil || p.Labels[nnv1.StateLabel] == nnv1.PodStateDraining) && drainStart.IsZero():
			drainStart = time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // turns after the drain
	close(stop)
	wg.Wait()
	if gone.IsZero() {
		t.Fatalf("interrupted pod %s still there %s after the notice", victim.Name, time.Since(notice))
	}
	if drainStart.IsZero() {
		drainStart = gone
	}
	t.Logf("notice -> drain started %s, -> interrupted pod gone %s (timeout %s)", drainStart.Sub(notice).Round(10*time.Millisecond),
		gone.Sub(notice).Round(10*time.Millisecond), spotInterruptionTimeout)
	if gone.Sub(notice) > spotInterruptionTimeout {
		t.Errorf("the drain ended %s after the notice; timeout %s", gone.Sub(notice), spotInterruptionTimeout)
	}

	repl := replacementPod(t, e, ns, victim.Name, odNode)
	final := l.next()
	checkSpotTurns(t, l, final, victim.Name, repl.Name, drainStart, gone)
	checkSpotHistory(t, l, scoper, &access.Tenant{Namespace: ns, Name: "e2e"}, repl.Status.PodIP)
}

// replacementPod returns the pool's one serving pod after the drain: Ready, on the on-demand node.
func replacementPod(t *testing.T, e *Env, ns, victim, odNode string) corev1.Pod {
	t.Helper()
	pods := poolPods(t, e, ns, "chat")["serving"]
	if len(pods) != 1 || pods[0].Name == victim || pods[0].Spec.NodeName != odNode || readyCount(pods) != 1 ||
		pods[0].Labels[nnv1.CapacityLabel] != "on-demand" {
		var got []string
		for _, p := range pods {
			got = append(got, p.Name+"@"+p.Spec.NodeName+"/"+p.Labels[nnv1.CapacityLabel])
		}
		t.Fatalf("serving pods after the drain %v; want one Ready on-demand pod on %s", got, odNode)
	}
	return pods[0]
}

// checkSpotTurns: no turn failed; each conversation's prompts grew turn by turn (its history
// came along); the final turn of every conversation ran on the replacement.
func checkSpotTurns(t *testing.T, l *spotLoad, final []spotTurn, victim, repl string, drainStart, gone time.Time) {
	t.Helper()
	var total, failed, inDrain, victimInDrain, onVictim, onRepl int
	for i, turns := range l.turns {
		for k, r := range turns {
			total++
			if !r.ok() {
				failed++
				t.Errorf("conversation %d turn %d lost: %v", i, r.n, r.err)
				continue
			}
			if r.start.Before(gone) && r.end.After(drainStart) {
				inDrain++
				if r.pod == victim {
					victimInDrain++
				}
			}
			switch r.pod {
			case victim:
				onVictim++
			case repl:
				onRepl++
			}
			if k > 0 && turns[k-1].ok() && r.context <= turns[k-1].context {
				t.Errorf("conversation %d turn %d: prompt of %d tokens, not longer than turn %d's %d: its history is missing", i, r.n, r.context, turns[k-1].n, turns[k-1].context)
			}
		}
		if f := final[i]; f.pod != repl {
			t.Errorf("conversation %d's next turn after the drain was served by %q, want the replacement %s", i, f.pod, repl)
		}
	}
	t.Logf("%d turns of %d conversations: %d failed, %d on the interrupted pod, %d on the replacement; in flight during the drain: %d, %d of them streamed by the interrupted pod",
		total, len(l.turns), failed, onVictim, onRepl, inDrain, victimInDrain)
	if victimInDrain == 0 {
		t.Error("no turn was streaming from the interrupted pod while it drained: the test did not load the drain")
	}
}

// checkSpotHistory reads every conversation through the replacement's sidecar: all its user turns,
// in order.
func checkSpotHistory(t *testing.T, l *spotLoad, scoper *sessionkey.Scoper, tenant *access.Tenant, ip string) {
	t.Helper()
	for i, sess := range l.sessions {
		resp, err := l.hc.Get("http://" + net.JoinHostPort(ip, "7070") + "/v1/sessions/" + scoper.Scope(tenant, sess))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Turns []struct{ Role, Content string }
		}
		err = json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("conversation %d via the replacement's sidecar: %d %v", i, resp.StatusCode, err)
		}
		var users []string
		for _, tr := range doc.Turns {
			if tr.Role == "user" {
				users = append(users, tr.Content)
			}
		}
		ok := len(users) == len(l.turns[i])
		for k := 0; ok && k < len(users); k++ {
			ok = users[k] == spotContent(i, k+1)
		}
		if !ok {
			t.Errorf("conversation %d: the replacement's sidecar holds %d user turns %q; want the %d sent, in order", i, len(users), users, len(l.turns[i]))
		}
	}
}

// labelSpotNodes makes spot a priced Karpenter spot node and od a priced on-demand node, both
// selected by the test's AgentClass; the labels go at cleanup.
func labelSpotNodes(t *testing.T, e *Env, ns, spot, od string) {
	t.Helper()
	set := func(name string, labels, ann map[string]any) {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels, "annotations": ann}})
		if _, err := e.Kube.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name, capacity := range map[string]string{spot: "spot", od: "on-demand"} {
		price := map[string]string{"spot": "1.2", "on-demand": "4"}[capacity]
		set(name, map[string]any{"karpenter.sh/capacity-type": capacity, "neuronetes.io/e2e-spot": ns},
			map[string]any{"neuronetes.io/price-per-hour": price})
		t.Cleanup(func() {
			set(name, map[string]any{"karpenter.sh/capacity-type": nil, "neuronetes.io/e2e-spot": nil},
				map[string]any{"neuronetes.io/price-per-hour": nil})
		})
	}
}

// taintNode adds (or removes) Karpenter's disruption taint karpenter.sh/disrupted:NoSchedule,
// reading the node again when another writer (the kubelet, the node controller) changed it.
func taintNode(t *testing.T, e *Env, name string, on bool) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := e.Kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var taints []corev1.Taint
		for _, tn := range n.Spec.Taints {
			if tn.Key != "karpenter.sh/disrupted" {
				taints = append(taints, tn)
			}
		}
		if on {
			taints = append(taints, corev1.Taint{Key: "karpenter.sh/disrupted", Effect: corev1.TaintEffectNoSchedule})
		}
		n.Spec.Taints = taints
		_, err = e.Kube.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Errorf("taint of node %s (on=%v): %v", name, on, err)
	}
}
