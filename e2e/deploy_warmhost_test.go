package e2e

// TestDeployLocal's subtest SessionWarmRestoreHost: the chart-installed session controller,
// under the chart's RBAC, admission policies and session NetworkPolicy, resumes a suspended
// session into a claimed warm restore host, deletes the ServiceAccount the session ran as before,
// and the restored process keeps its state and reaches only what the chart's policy admits.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
)

// warmHostClassYAML: an AgentClass keeping one warm restore host, whose agent is
// e2e/cmd/session-agent calling its tool at %[2]s (the tool proxy's address), as root (CRIU on
// the development VM dumps only root processes, docs/checkpoint.md).
const warmHostClassYAML = `apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: np-host}
spec:
  sessions: {warmRestoreHosts: 1}
  template:
    spec:
      terminationGracePeriodSeconds: 1
      securityContext: {runAsNonRoot: false}
      containers:
      - name: agent
        image: %[1]s
        imagePullPolicy: Never
        args: ["--listen=:8000", "--tool-url=http://%[2]s/v1/tools/facts"]
        env: [{name: GODEBUG, value: multipathtcp=0}]
        securityContext: {runAsUser: 0}
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentSession
metadata: {name: np-host-s}
spec:
  classRef: {name: np-host}
`

// sessionAgentTurn posts one chat turn straight to the session agent at ip (no keep-alive) and
// returns the streamed answer's body.
func sessionAgentTurn(ip, text string) (string, error) {
	body, _ := json.Marshal(map[string]any{"messages": []any{map[string]string{"role": "user", "content": text}}})
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Post("http://"+net.JoinHostPort(ip, "8000")+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("turn %q: %s %s", text, resp.Status, b)
	}
	return string(b), nil
}

// deploySessionWarmRestoreHost is TestDeployLocal's subtest SessionWarmRestoreHost. The node
// agent that checkpoints and restores, the controller, its RBAC, its admission policies and the
// session NetworkPolicy are the chart's.
// The tool proxy is a stand-in pod with the chart dispatcher's labels on dispatcher.toolPort
// (local values leave the dispatcher off: it needs a broker), which is what the chart's session
// policy admits. A session of a class keeping one warm restore host serves three turns, is
// suspended by spec.suspend and resumed: it must run in the claimed host (checkWarmHostClaimed),
// the ServiceAccount it ran as before (session-np-host-s) must be deleted, the restored process
// must hold the three answers and the journal, and from it a listener in another namespace and
// an unlabelled pod of its own namespace are refused three times in a row while the tool proxy
// connects and answers a fourth turn.
func deploySessionWarmRestoreHost(t *testing.T, e *Env, r *deployRelease) {
	sock := requireContainerCRIU(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	ns := r.exampleNS
	e.Kubectl(t, "label", "namespace", ns, "--overwrite", "pod-security.kubernetes.io/enforce=baseline")
	t.Cleanup(func() {
		_, _ = e.KubectlErr("label", "namespace", ns, "--overwrite", "pod-security.kubernetes.io/enforce=restricted")
	})
	engine := chartRestoreCleaner(t, sock)
	c := crClient(t, e.Config)

	netcheckImg := e.Image(t, "netcheck", "./e2e/cmd/netcheck")
	proxyLabels := fmt.Sprintf("app.kubernetes.io/name: neuronetes, app.kubernetes.io/instance: %s, app.kubernetes.io/component: dispatcher", r.name)
	e.Apply(t, r.namespace, netcheckServer("np-host-toolproxy", proxyLabels, netcheckImg, ":8091", false))
	outside := e.Namespace(t, "np-host-out")
	e.Apply(t, outside, netcheckServer("listener", "", netcheckImg, ":8080", false))
	e.Apply(t, ns, netcheckServer("np-host-peer", "", netcheckImg, ":8080", false))
	proxy := net.JoinHostPort(e.WaitPodRunning(t, r.namespace, "np-host-toolproxy", 2*time.Minute).Status.PodIP, "8091")
	listener := net.JoinHostPort(e.WaitPodRunning(t, outside, "listener", 2*time.Minute).Status.PodIP, "8080")
	peer := net.JoinHostPort(e.WaitPodRunning(t, ns, "np-host-peer", 2*time.Minute).Status.PodIP, "8080")

	img := e.Image(t, "session-agent", "./e2e/cmd/session-agent")
	e.Apply(t, ns, fmt.Sprintf(warmHostClassYAML, img, proxy))
	// Before the session and its pods go (cleanups run last first).
	t.Cleanup(func() { removeRestoredIn(t, c, engine, ns) })
	t.Cleanup(func() {
		if t.Failed() {
			logSessionObjects(t, c, ns)
			st, _ := e.KubectlErr("-n", ns, "get", "agentsession/np-host-s", "-o", "jsonpath={.status}")
			pods, _ := e.KubectlErr("-n", ns, "get", "pods", "-o", "wide", "--show-labels")
			logs, _ := e.KubectlErr("-n", r.namespace, "logs", "deploy/"+r.name+"-neuronetes-controller", "--tail=400")
			var mine []string
			for _, l := range strings.Split(logs, "\n") {
				if strings.Contains(l, "np-host") {
					mine = append(mine, l)
				}
			}
			t.Logf("status %s\npods:\n%s\ncontroller log lines naming np-host:\n%s", st, pods, strings.Join(mine, "\n"))
		}
	})
	session := func() *v1alpha1.AgentSession {
		var s v1alpha1.AgentSession
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "np-host-s"}, &s); err != nil {
			t.Fatal(err)
		}
		return &s
	}
	s := waitSessionPhase(ctx, t, c, ns, "np-host-s", v1alpha1.SessionRunning, 2*time.Minute)
	first, oldSA := s.Status.PodName, s.Status.ServiceAccountName
	if first != "np-host-s-1" || oldSA != "session-np-host-s" {
		t.Fatalf("fresh session in pod %q as %q, want np-host-s-1 as session-np-host-s", first, oldSA)
	}
	ip := podIPOf(t, c, ns, first)
	Eventually(t, 30*time.Second, "session agent of "+first+" answers /readyz", func() (bool, error) { return agentReady(ip) })
	for i := 1; i <= 3; i++ {
		out, err := sessionAgentTurn(ip, fmt.Sprintf("turn %d", i))
		if err != nil || !strings.Contains(out, fmt.Sprintf("turn %d; I remember %d tool answers", i, i)) {
			t.Fatalf("turn %d in %s: %v %s", i, first, err, out)
		}
	}
	var before sessionAgentState
	if err := sessionAgentGet(ip, "/state", &before); err != nil {
		t.Fatal(err)
	}

	setSessionSuspend(ctx, t, c, ns, "np-host-s", true)
	s = waitSessionPhase(ctx, t, c, ns, "np-host-s", v1alpha1.SessionSuspended, 2*time.Minute)
	t.Logf("suspended %s: checkpoint %s", first, s.Status.LastCheckpoint)
	Eventually(t, 2*time.Minute, "a running warm restore host of np-host", func() (bool, error) {
		var l corev1.PodList
		if err := c.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.WarmPoolLabel: "np-host", v1alpha1.WarmRestoreHostLabel: "true"}); err != nil {
			return false, err
		}
		return len(l.Items) == 1 && l.Items[0].Status.Phase == corev1.PodRunning, fmt.Errorf("%d hosts", len(l.Items))
	})
	setSessionSuspend(ctx, t, c, ns, "np-host-s", false)
	s = waitSessionPhase(ctx, t, c, ns, "np-host-s", v1alpha1.SessionRunning, 2*time.Minute)
	checkWarmHostClaimed(ctx, t, c, s)
	host := s.Status.PodName

	// The ServiceAccount the session ran as before is deleted, through the chart's admission
	// policy; the host's, which it runs as now, stays.
	Eventually(t, time.Minute, "ServiceAccount "+oldSA+" deleted", func() (bool, error) {
		_, err := e.Kube.CoreV1().ServiceAccounts(ns).Get(ctx, oldSA, metav1.GetOptions{})
		cur := session()
		return apierrors.IsNotFound(err) && len(cur.Status.RetiredServiceAccountNames) == 0,
			fmt.Errorf("get: %v; retired %v", err, cur.Status.RetiredServiceAccountNames)
	})
	if _, err := e.Kube.CoreV1().ServiceAccounts(ns).Get(ctx, s.Status.ServiceAccountName, metav1.GetOptions{}); err != nil {
		t.Fatalf("the ServiceAccount the session runs as now, %s: %v", s.Status.ServiceAccountName, err)
	}

	ip2 := podIPOf(t, c, ns, host)
	var after sessionAgentState
	if err := sessionAgentGet(ip2, "/state", &after); err != nil {
		t.Fatal(err)
	}
	if after.Turns != 3 || after.MemorySHA256 != before.MemorySHA256 || after.Journal != before.Journal {
		t.Fatalf("restored state %+v, want %+v", after, before)
	}
	t.Logf("resumed into warm restore host %s: memory SHA-256 %s and journal (%d bytes) intact", host, after.MemorySHA256, len(after.Journal))

	for _, target := range []string{listener, peer, proxy} {
		conn, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			t.Fatalf("%s does not accept the test's own connection: %v", target, err)
		}
		conn.Close()
	}
	dialFrom := func(target string) string {
		var res struct{ Error string }
		if err := sessionAgentGet(ip2, "/dial?addr="+target, &res); err != nil {
			return "no answer: " + err.Error()
		}
		return res.Error
	}
	for _, target := range []string{listener, peer} {
		refusals := 0
		Eventually(t, time.Minute, target+" refused 3 times in a row from the restored process", func() (bool, error) {
			if msg := dialFrom(target); msg == "" {
				refusals = 0
				return false, fmt.Errorf("connected: the chart's session policy lets %s reach %s", host, target)
			}
			refusals++
			return refusals >= 3, nil
		})
	}
	if msg := dialFrom(proxy); msg != "" {
		t.Fatalf("the restored process cannot reach the tool proxy %s: %s", proxy, msg)
	}
	out, err := sessionAgentTurn(ip2, "turn 4")
	if err != nil || !strings.Contains(out, "turn 4; I remember 4 tool answers") {
		t.Fatalf("turn 4 in the restored process: %v %s", err, out)
	}
	var last sessionAgentState
	if err := sessionAgentGet(ip2, "/state", &last); err != nil || last.Turns != 4 || !slices.Equal(last.Memory[:3], before.Memory) {
		t.Fatalf("state after turn 4 %+v (%v)", last, err)
	}
	if !strings.HasPrefix(last.Journal, before.Journal) || strings.Count(last.Journal, "\n") != 4 {
		t.Fatalf("journal after turn 4 %q, want the three lines of %q and a fourth", last.Journal, before.Journal)
	}
}
