//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// netpolStandIns are pods labelled as the release's components that the gateway e2e setup runs
// as host processes or not at all: each serves HTTP (netcheck) on the chart's default port, named
// as in the chart's pod templates, so the chart's NetworkPolicies select them as they select the
// real pods.
var netpolStandIns = []struct{ component, portName, port string }{
	{"controller", "metrics", "9402"},
	{"dispatcher", "admin", "9091"},
	{"node", "driver-metrics", "9401"},
	{"redis", "redis", "6379"},
}

// TestAttackNetworkPolicy installs the chart's NetworkPolicies next to the gateway e2e setup (its
// gateway pods, the chat pool's agent pods, tenants and keys) and attacks from a pod in another
// namespace: a direct call to an agent pod, to each admin and metrics port and to Redis times out
// (the local cluster's enforcer drops it), while the gateway's API port answers and a chat
// completion through the gateway reaches an agent. A pod labelled as the release's controller
// reaches the same admin ports and Redis, so the refusals are the policies, not bad addresses.
//
//	NEURONETES_E2E=1 go test -tags e2e -count=1 -run 'TestAttackNetworkPolicy' ./e2e/
func TestAttackNetworkPolicy(t *testing.T) {
	if out, err := exec.Command("nft", "list", "table", "inet", "kube-network-policies").CombinedOutput(); err != nil {
		t.Fatalf("the local cluster runs no NetworkPolicy enforcer (nft list table inet kube-network-policies: %v: %s): see .local/logs/kube-network-policies.log and make cluster-up's output (a kernel without CONFIG_NFT_QUEUE cannot run it)", err, out)
	}
	g := gweSetup(t)
	e := g.e
	img := e.Image(t, "netcheck", "./e2e/cmd/netcheck")
	addrs := map[string]string{}
	for _, s := range netpolStandIns {
		name := "standin-" + s.component
		e.Apply(t, g.ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
  labels: {app.kubernetes.io/name: neuronetes, app.kubernetes.io/instance: %[2]s, app.kubernetes.io/component: %[3]s}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: serve
    image: %[4]s
    imagePullPolicy: Never
    command: ["/netcheck", "serve", "-addr", ":%[5]s"]
    ports: [{name: %[6]s, containerPort: %[5]s}]
`, name, g.ns, s.component, img, s.port, s.portName))
		addrs[s.component] = net.JoinHostPort(e.WaitPodRunning(t, g.ns, name, time.Minute).Status.PodIP, s.port)
	}
	gw := g.replicaIPs(t)[0]
	addrs["gateway-admin"] = net.JoinHostPort(gw, "9090")
	agents, err := e.Kube.CoreV1().Pods(g.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "neuronetes.io/pool=chat,neuronetes.io/state=serving"})
	if err != nil || len(agents.Items) == 0 {
		t.Fatalf("no serving chat agent pod: %v", err)
	}
	agentIP := agents.Items[0].Status.PodIP
	addrs["agent"] = net.JoinHostPort(agentIP, "8000")
	netpolApply(t, g)
	// The enforcer filters a pod once it has seen a policy that selects it.
	Eventually(t, 30*time.Second, "the enforcer filters the agent pod "+agentIP, func() (bool, error) {
		out, err := exec.Command("nft", "list", "set", "inet", "kube-network-policies", "podips-v4").CombinedOutput()
		return err == nil && strings.Contains(string(out), agentIP), fmt.Errorf("podips-v4: %s %v", out, err)
	})

	attackerNS := e.Namespace(t, "nn-attacker")
	refused := []string{"agent", "gateway-admin", "controller", "dispatcher", "node", "redis"}
	var args []string
	for _, k := range append(refused, "gateway-api") {
		a := addrs[k]
		if k == "gateway-api" {
			a = net.JoinHostPort(gw, "8080")
		}
		args = append(args, "-dial", a)
	}
	attack := dialResults(runNetcheck(t, e, attackerNS, "attacker", img, append([]string{"probe"}, args...)...))
	// The controller reaches every admin port and Redis (the positive control for the refusals).
	var ctrlArgs []string
	for _, k := range []string{"gateway-admin", "dispatcher", "node", "redis"} {
		ctrlArgs = append(ctrlArgs, "-dial", addrs[k])
	}
	ctrl := dialResults(runNetcheckLabelled(t, e, g.ns, "as-controller", img,
		"app.kubernetes.io/name: neuronetes, app.kubernetes.io/instance: "+g.ns+", app.kubernetes.io/component: controller",
		append([]string{"probe"}, ctrlArgs...)...))

	expectRefused := func(t *testing.T, keys ...string) {
		t.Helper()
		for _, k := range keys {
			if err := attack[addrs[k]]; !strings.Contains(err, "timeout") {
				t.Errorf("attacker pod in %s dialled %s (%s): %q, want a timeout (dropped by policy)", attackerNS, k, addrs[k], err)
			}
		}
	}
	t.Run("DirectCallToAgentPod", func(t *testing.T) { expectRefused(t, "agent") })
	t.Run("AdminPortsFromOtherNamespace", func(t *testing.T) {
		expectRefused(t, "gateway-admin", "controller", "dispatcher", "node")
		for _, k := range []string{"gateway-admin", "dispatcher", "node"} {
			if err := ctrl[addrs[k]]; err != "" {
				t.Errorf("the controller could not reach %s (%s): %s", k, addrs[k], err)
			}
		}
	})
	t.Run("RedisFromOtherNamespace", func(t *testing.T) {
		expectRefused(t, "redis")
		if err := ctrl[addrs["redis"]]; err != "" {
			t.Errorf("the controller could not reach Redis (%s): %s", addrs["redis"], err)
		}
	})
	t.Run("GatewayPathWorks", func(t *testing.T) {
		if err := attack[net.JoinHostPort(gw, "8080")]; err != "" {
			t.Errorf("attacker pod could not reach the gateway's API port: %s", err)
		}
		r := g.send(t, gweKeyA, "s-netpol", false, 8, "hello")
		if r.status != 200 || r.header.Get("X-Neuronetes-Pod") == "" {
			t.Fatalf("chat completion through the gateway: status %d, pod %q, body %s", r.status, r.header.Get("X-Neuronetes-Pod"), r.body)
		}
	})
}

// netpolApply renders the chart's NetworkPolicies for the gateway setup's namespace (the release
// is named like it, as gweEnv.deploy does) with the bundled Redis and the dispatcher on, and
// applies them.
func netpolApply(t *testing.T, g *gweEnv) {
	t.Helper()
	cmd := exec.Command(deployHelm(t, g.e), "template", g.ns, filepath.Join(g.e.Root, "deploy", "helm", "neuronetes"), "-n", g.ns,
		"-f", filepath.Join(g.e.Root, "deploy", "helm", "values", "local.yaml"),
		"--set-json", fmt.Sprintf(`gateway={"watchNamespaces":[%q]}`, g.ns),
		"--set-json", `redis={"address":"","bundled":{"enabled":true}}`,
		"--set-json", `dispatcher={"enabled":true}`,
		"--show-only", "templates/networkpolicies.yaml")
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("helm template: %v %s", err, msg)
	}
	g.e.Apply(t, g.ns, string(out))
}

// dialResults maps each dial's address to its error ("" when it connected).
func dialResults(rs []netResult) map[string]string {
	out := map[string]string{}
	for _, r := range rs {
		if r.Check == "dial" {
			out[r.Input] = r.Error
		}
	}
	return out
}
