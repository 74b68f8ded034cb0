package e2e

// Attack on the network boundary (docs/networkpolicy.md): a pod of another namespace calls an
// agent pod directly, bypassing the gateway's authentication and quotas, and calls the admin
// and metrics ports of the gateway and the controller. The local cluster's enforcer
// (kube-network-policies, e2e/cluster/netpol.go) applies the chart's policies and the agent
// policy the controller keeps in the pool's namespace.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// releasePodIP returns the IP of a running pod of the release's component.
func releasePodIP(t *testing.T, e *Env, r *deployRelease, component string) string {
	t.Helper()
	pods, err := e.Kube.CoreV1().Pods(r.namespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + r.name + ",app.kubernetes.io/component=" + component})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && !p.Spec.HostNetwork {
			return p.Status.PodIP
		}
	}
	t.Fatalf("no running %s pod of release %s", component, r.name)
	return ""
}

// dialOutcomes maps each dial target of netcheck results to "" (connected) or its error.
func dialOutcomes(res []netResult) map[string]string {
	out := map[string]string{}
	for _, r := range res {
		out[r.Input] = r.Error
	}
	return out
}

// deployAttackNetworkPolicy is TestDeployLocal's subtest AttackNetworkPolicy. It needs the
// Examples' mig-agents pool. From a namespace without pools, a pod (and one carrying the
// gateway's labels) dials an agent pod, the gateway's admin port and the controller's metrics
// port: each is refused, while the gateway's API port answers. A pod with the gateway's labels in
// the release namespace (the gateway's peer) reaches the same agent port, so the refusals are the
// policies' doing; the agent still serves afterwards.
func deployAttackNetworkPolicy(t *testing.T, e *Env, r *deployRelease) {
	ctx := context.Background()
	name := r.name + "-neuronetes-agents"
	Eventually(t, time.Minute, "the controller's agent NetworkPolicy in "+r.exampleNS, func() (bool, error) {
		np, err := e.Kube.NetworkingV1().NetworkPolicies(r.exampleNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return np.Labels[nnv1.ManagedByLabel] == nnv1.ManagedByController &&
			len(np.Spec.PolicyTypes) == 2, fmt.Errorf("policy %+v", np.ObjectMeta)
	})
	serving := podsInState(t, e, r.exampleNS, "mig-agents", "serving")
	if len(serving) == 0 {
		t.Fatal("no serving mig-agents pod")
	}
	pod, err := e.Kube.CoreV1().Pods(r.exampleNS).Get(ctx, serving[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agent := net.JoinHostPort(pod.Status.PodIP, "8000")
	gw := releasePodIP(t, e, r, "gateway")
	gwAPI, gwAdmin := net.JoinHostPort(gw, "8080"), net.JoinHostPort(gw, "9090")
	ctrlMetrics := net.JoinHostPort(releasePodIP(t, e, r, "controller"), fmt.Sprint(deployCtrlMetrics))
	img := e.Image(t, "netcheck", "./e2e/cmd/netcheck")
	gwLabels := fmt.Sprintf("app.kubernetes.io/name: neuronetes, app.kubernetes.io/instance: %s, app.kubernetes.io/component: gateway", r.name)

	attackerNS := e.Namespace(t, "np-attacker")
	refused := []string{agent, gwAdmin, ctrlMetrics}
	for _, c := range []struct{ name, labels string }{{"attacker", ""}, {"attacker-as-gateway", gwLabels}} {
		args := []string{"probe"}
		for _, a := range append(refused, gwAPI) {
			args = append(args, "-dial", a)
		}
		got := dialOutcomes(runNetcheckLabelled(t, e, attackerNS, c.name, img, c.labels, args...))
		for _, a := range refused {
			if msg, ok := got[a]; !ok || msg == "" {
				t.Errorf("%s in %s reached %s (result %q, present %v), want it refused", c.name, attackerNS, a, msg, ok)
			}
		}
		if msg := got[gwAPI]; msg != "" {
			t.Errorf("%s in %s could not reach the gateway's API port %s: %s", c.name, attackerNS, gwAPI, msg)
		}
	}

	// The gateway's peer reaches the agent: the refusals above are the policies'.
	const peer = "np-gateway-peer"
	t.Cleanup(func() { _ = e.Kube.CoreV1().Pods(r.namespace).Delete(ctx, peer, metav1.DeleteOptions{}) })
	got := dialOutcomes(runNetcheckLabelled(t, e, r.namespace, peer, img, gwLabels, "probe", "-dial", agent))
	if msg, ok := got[agent]; !ok || msg != "" {
		t.Errorf("a pod with the gateway's labels in the release namespace could not reach agent %s: %q", agent, msg)
	}

	// A tenant-side change to the policy is reverted (the controller owns it).
	np, err := e.Kube.NetworkingV1().NetworkPolicies(r.exampleNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{})
	if _, err := e.Kube.NetworkingV1().NetworkPolicies(r.exampleNS).Update(ctx, np, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	Eventually(t, time.Minute, "the controller restores the agent policy", func() (bool, error) {
		np, err := e.Kube.NetworkingV1().NetworkPolicies(r.exampleNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, in := range np.Spec.Ingress {
			if len(in.From) == 0 {
				return false, fmt.Errorf("an allow-all ingress rule is still there")
			}
		}
		return true, nil
	})
	if err := post("http://"+agent+"/v1/chat/completions", `{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`, "X-Conversation-ID", "e2e-np"); err != nil {
		t.Errorf("the agent no longer serves after the attacks: %v", err)
	}
}

// deployAttackAgentEgressOverDNSPort is TestDeployLocal's subtest AttackAgentEgressOverDNSPort:
// code in an agent pod tries to tunnel out over port 53, which every cluster leaves open for DNS,
// to a listener of its own in another namespace. From a pod of the Examples' namespace carrying
// neuronetes.io/pool (the label the agent policy selects) the dial is refused; from an unlabelled
// pod of the same namespace it connects, so the refusal is the agent policy's DNS rule, which names
// only the cluster's DNS. The enforcer never filters UDP 53 (docs/development.md), so only TCP is
// tried. The dials run in long-lived pods (kubectl exec) and are repeated: the enforcer filters a
// pod only once its address is in its set, a moment after the pod starts.
func deployAttackAgentEgressOverDNSPort(t *testing.T, e *Env, r *deployRelease) {
	img := e.Image(t, "netcheck", "./e2e/cmd/netcheck")
	outside := e.Namespace(t, "np-dns-tunnel")
	e.Apply(t, outside, netcheckServer("listener", "", img, ":53", true))
	target := net.JoinHostPort(e.WaitPodRunning(t, outside, "listener", 2*time.Minute).Status.PodIP, "53")
	e.Apply(t, r.exampleNS, netcheckServer("np-dns-agent", "neuronetes.io/pool: mig-agents", img, ":8080", false)+"---\n"+
		netcheckServer("np-dns-plain", "", img, ":8080", false))
	dial := func(pod string) string {
		out, err := e.KubectlErr("-n", r.exampleNS, "exec", pod, "--", "/netcheck", "probe", "-dial", target)
		var res netResult
		if jerr := json.Unmarshal([]byte(strings.TrimSpace(out)), &res); jerr != nil {
			return fmt.Sprintf("no result (%v): %v", jerr, err)
		}
		return res.Error
	}
	for _, pod := range []string{"np-dns-agent", "np-dns-plain"} {
		e.WaitPodRunning(t, r.exampleNS, pod, 2*time.Minute)
	}
	Eventually(t, time.Minute, "an unlabelled pod of "+r.exampleNS+" reaches the listener "+target, func() (bool, error) {
		msg := dial("np-dns-plain")
		return msg == "", errors.New(msg)
	})
	refusals := 0
	Eventually(t, time.Minute, "TCP 53 to "+target+" refused 3 times in a row from a pod labelled neuronetes.io/pool", func() (bool, error) {
		if msg := dial("np-dns-agent"); msg == "" {
			refusals = 0
			return false, errors.New("connected: the agent policy lets port 53 go anywhere")
		}
		refusals++
		return refusals >= 3, nil
	})
}

// netcheckServer is a Pod running netcheck serve on addr. root runs it as root (a port below
// 1024 in a namespace without Pod Security); otherwise it meets Pod Security restricted.
func netcheckServer(name, labels, img, addr string, root bool) string {
	sc := "securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}"
	csc := "securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}"
	if root {
		sc, csc = "securityContext: {runAsUser: 0}", "securityContext: {}"
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  labels: {%s}
spec:
  terminationGracePeriodSeconds: 1
  %s
  containers:
  - name: netcheck
    image: %s
    imagePullPolicy: Never
    command: ["/netcheck", "serve", "-addr", %q]
    %s
`, name, labels, sc, img, addr, csc)
}
