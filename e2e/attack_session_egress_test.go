package e2e

// Attack on an AgentSession's network boundary (docs/networkpolicy.md, "AgentSession policies"):
// code in a session's pod tries to reach a server in another namespace and the gateway. The
// session controller's policy session-<name> admits egress only to DNS, the tool proxy and the
// sidecar's Redis, so both are refused, while an ordinary pod of the same namespace reaches them.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sessionEgressYAML: an AgentClass whose agent is netcheck's server (long-lived, so the test can
// exec dials in it) and a session of it.
const sessionEgressYAML = `apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: np-session}
spec:
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
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentSession
metadata: {name: np-sess}
spec:
  classRef: {name: np-session}
`

// deployAttackSessionEgress is TestDeployLocal's subtest AttackSessionEgress: from the pod of an
// AgentSession in the controller's namespace, dials to a listener in another namespace and to the
// gateway's API port are refused three times in a row; from an unlabelled pod of the same
// namespace both connect, so the refusals are the session policy's.
func deployAttackSessionEgress(t *testing.T, e *Env, r *deployRelease) {
	ctx := context.Background()
	img := e.Image(t, "netcheck", "./e2e/cmd/netcheck")
	outside := e.Namespace(t, "np-sess-out")
	e.Apply(t, outside, netcheckServer("listener", "", img, ":8080", false))
	listener := net.JoinHostPort(e.WaitPodRunning(t, outside, "listener", 2*time.Minute).Status.PodIP, "8080")
	gwAPI := net.JoinHostPort(releasePodIP(t, e, r, "gateway"), "8080")

	e.Apply(t, r.exampleNS, fmt.Sprintf(sessionEgressYAML, img)+"---\n"+netcheckServer("np-sess-plain", "", img, ":8080", false))
	t.Cleanup(func() {
		e.KubectlErr("-n", r.exampleNS, "delete", "agentsession/np-sess", "agentclass/np-session", "--ignore-not-found")
	})
	Eventually(t, time.Minute, "NetworkPolicy session-np-sess", func() (bool, error) {
		_, err := e.Kube.NetworkingV1().NetworkPolicies(r.exampleNS).Get(ctx, "session-np-sess", metav1.GetOptions{})
		return err == nil, err
	})
	e.WaitPodRunning(t, r.exampleNS, "np-sess-1", 2*time.Minute)
	e.WaitPodRunning(t, r.exampleNS, "np-sess-plain", 2*time.Minute)
	dial := func(pod, container, target string) string {
		out, err := e.KubectlErr("-n", r.exampleNS, "exec", pod, "-c", container, "--", "/netcheck", "probe", "-dial", target)
		var res netResult
		if jerr := json.Unmarshal([]byte(strings.TrimSpace(out)), &res); jerr != nil {
			return fmt.Sprintf("no result (%v): %v", jerr, err)
		}
		return res.Error
	}
	for _, target := range []string{listener, gwAPI} {
		Eventually(t, time.Minute, "an unlabelled pod of "+r.exampleNS+" reaches "+target, func() (bool, error) {
			msg := dial("np-sess-plain", "netcheck", target)
			return msg == "", errors.New(msg)
		})
		refusals := 0
		Eventually(t, time.Minute, target+" refused 3 times in a row from the session's pod", func() (bool, error) {
			if msg := dial("np-sess-1", "agent", target); msg == "" {
				refusals = 0
				return false, errors.New("connected: the session policy lets the session's pod reach " + target)
			}
			refusals++
			return refusals >= 3, nil
		})
	}
}
