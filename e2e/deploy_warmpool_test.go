package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sessionWarmPoolYAML: an AgentClass with a warm session pool of one (netcheck's server as the
// agent, restricted settings) and, separately, a session of it.
const sessionWarmPoolYAML = `apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: np-warm}
spec:
  sessions: {warmPoolSize: 1}
  template:
    spec:
      terminationGracePeriodSeconds: 1
      securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: agent
        image: %s
        imagePullPolicy: Never
        command: ["/netcheck", "serve", "-addr", ":8080"]
        securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
`

const warmSessionYAML = `apiVersion: neuronetes.io/v1alpha1
kind: AgentSession
metadata: {name: np-warm-s}
spec:
  classRef: {name: np-warm}
`

// deploySessionWarmPool is TestDeployLocal's subtest SessionWarmPool: the chart-installed
// controller, under the chart's RBAC and its controller-writes admission policy, fills an
// AgentClass's warm session pool (NetworkPolicy, ServiceAccount, pod), a new session claims the
// warm pod and its ServiceAccount, its PodDisruptionBudget refuses the pod's eviction, and the
// pool refills.
func deploySessionWarmPool(t *testing.T, e *Env, r *deployRelease) {
	ctx := context.Background()
	ns := r.exampleNS
	img := e.Image(t, "netcheck", "./e2e/cmd/netcheck")
	e.Apply(t, ns, fmt.Sprintf(sessionWarmPoolYAML, img))
	t.Cleanup(func() {
		e.KubectlErr("-n", ns, "delete", "agentsession/np-warm-s", "agentclass/np-warm", "--ignore-not-found")
	})
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// What the controller did: the session's and the class's events and its log lines.
		ev, _ := e.KubectlErr("-n", ns, "get", "events", "--field-selector", "involvedObject.name=np-warm-s", "-o", "custom-columns=REASON:.reason,MSG:.message")
		st, _ := e.KubectlErr("-n", ns, "get", "agentsession/np-warm-s", "-o", "jsonpath={.status}")
		pods, _ := e.KubectlErr("-n", ns, "get", "pods", "-o", "wide", "--show-labels")
		logs, _ := e.KubectlErr("-n", r.namespace, "logs", "deploy/"+r.name+"-neuronetes-controller", "--tail=400")
		var mine []string
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, "np-warm") {
				mine = append(mine, l)
			}
		}
		t.Logf("session events:\n%s\nstatus %s\npods:\n%s\ncontroller log lines naming np-warm:\n%s", ev, st, pods, strings.Join(mine, "\n"))
	})
	warmPods := func() ([]string, error) {
		l, err := e.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "neuronetes.io/session-warm-pool=np-warm"})
		if err != nil {
			return nil, err
		}
		var ready []string
		for _, p := range l.Items {
			if p.Status.Phase == "Running" && p.DeletionTimestamp == nil {
				ready = append(ready, p.Name)
			}
		}
		return ready, nil
	}
	var first []string
	Eventually(t, 2*time.Minute, "a Running warm pod of np-warm", func() (bool, error) {
		var err error
		first, err = warmPods()
		if err == nil && len(first) == 0 {
			cond, _ := e.KubectlErr("-n", ns, "get", "agentclass/np-warm", "-o", "jsonpath={.status.conditions}")
			err = errors.New("none yet; class conditions " + cond)
		}
		return len(first) == 1, err
	})
	if _, err := e.Kube.NetworkingV1().NetworkPolicies(ns).Get(ctx, "warmpool-np-warm", metav1.GetOptions{}); err != nil {
		t.Errorf("the warm pool's NetworkPolicy: %v", err)
	}
	e.Apply(t, ns, warmSessionYAML)
	var pod, sa string
	Eventually(t, time.Minute, "session np-warm-s Running in the warm pod", func() (bool, error) {
		out, err := e.KubectlErr("-n", ns, "get", "agentsession/np-warm-s", "-o", "jsonpath={.status.phase} {.status.podName} {.status.serviceAccountName}")
		f := strings.Fields(out)
		if len(f) == 3 {
			pod, sa = f[1], f[2]
		}
		return len(f) == 3 && f[0] == "Running" && pod == first[0] && sa == first[0], fmt.Errorf("status %q (%v)", out, err)
	})
	// The session's PodDisruptionBudget, created by the chart-installed controller under its
	// RBAC and the controller-writes policy, refuses the eviction of the claimed pod.
	requireEvictionRefused(t, e, ns, "np-warm-s", pod)
	Eventually(t, time.Minute, "the warm ServiceAccount handed to the session", func() (bool, error) {
		acct, err := e.Kube.CoreV1().ServiceAccounts(ns).Get(ctx, sa, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ref := metav1.GetControllerOf(acct)
		return ref != nil && ref.Kind == "AgentSession" && ref.Name == "np-warm-s" && acct.Labels["neuronetes.io/session"] == "np-warm-s",
			fmt.Errorf("owner %+v labels %v", ref, acct.Labels)
	})
	Eventually(t, 2*time.Minute, "the pool refilled with another warm pod", func() (bool, error) {
		now, err := warmPods()
		return len(now) == 1 && now[0] != pod, fmt.Errorf("warm pods %v (%v)", now, err)
	})
	t.Logf("session np-warm-s claimed warm pod %s (ServiceAccount %s) under the chart's RBAC and admission policy; the pool refilled", pod, sa)
}
