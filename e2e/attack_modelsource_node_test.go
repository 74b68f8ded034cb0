package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/internal/modelsrcapi"
)

// deployAttackFetchAnotherNodesModel is deployAttackModelSourceSecrets' subtest
// NodeAgentFetchesAnotherNodesModel: the Model remote (A's own Secret) is used only by a pod on a
// kwok node. The real node's agent is refused its credentials (NotUsedOnNode in its status entry,
// with no credential in the message), never caches it, and the same refusal comes to a token
// bound to that agent's pod sent straight to the controller's endpoint, which answers that token
// for own (used on the node). A pod of the tenant's default ServiceAccount on the node is refused
// own (NotNodeAgent), and the agent's token for another audience is not authenticated. The
// tenant's Secret is unchanged.
func deployAttackFetchAnotherNodesModel(t *testing.T, e *Env, r *deployRelease, remoteDigest string) {
	ctx := context.Background()
	models := e.Dynamic.Resource(modelGVR).Namespace(r.exampleNS)
	credsBefore, err := e.Kube.CoreV1().Secrets(r.exampleNS).Get(ctx, "a-creds", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, 2*time.Minute, "Model remote refused on the real node", func() (bool, error) {
		u, err := models.Get(ctx, "remote", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		phase, msg := nodeEntry(u, e.NodeName)
		return phase == "Failed" && strings.Contains(msg, modelsrcapi.ReasonNotUsedOnNode), fmt.Errorf("node phase %q %q", phase, msg)
	})
	u, _ := models.Get(ctx, "remote", metav1.GetOptions{})
	if _, msg := nodeEntry(u, e.NodeName); strings.Contains(msg, "nn-e2e-secret-key") {
		t.Errorf("the refusal in status carries the credentials: %q", msg)
	}
	t.Logf("[e2e] real node's status entry for Model remote: %s", func() string { _, m := nodeEntry(u, e.NodeName); return m }())
	n, err := e.Kube.CoreV1().Nodes().Get(ctx, e.NodeName, metav1.GetOptions{})
	if err != nil || n.Labels[v1alpha1.WarmNodeLabel(remoteDigest)] != "" {
		t.Errorf("the real node is warm for a Model used only on a kwok node: %v %v", n.Labels, err)
	}

	// The endpoint, as the host reaches it: the Service's ClusterIP, the certificate's name, the
	// caBundle the node agents trust.
	svcName := r.name + "-neuronetes-controller"
	svc, err := e.Kube.CoreV1().Services(r.namespace).Get(ctx, svcName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var port int32
	for _, p := range svc.Spec.Ports {
		if p.Name == "model-sources" {
			port = p.Port
		}
	}
	if port == 0 {
		t.Fatalf("Service %s has no model-sources port: %+v", svcName, svc.Spec.Ports)
	}
	base := "https://" + net.JoinHostPort(svc.Spec.ClusterIP, fmt.Sprint(port))
	serverName := svcName + "." + r.namespace + ".svc"
	wh, err := e.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "neuronetes-sidecar-injector-"+r.namespace, metav1.GetOptions{})
	if err != nil || len(wh.Webhooks) == 0 {
		t.Fatalf("webhook configuration: %v", err)
	}
	ca := wh.Webhooks[0].ClientConfig.CABundle
	pods, err := e.Kube.CoreV1().Pods(r.namespace).List(ctx, metav1.ListOptions{LabelSelector: "neuronetes.io/node-pod=nodeagent", FieldSelector: "spec.nodeName=" + e.NodeName})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the node agent pod on %s: %v (%d)", e.NodeName, err, len(pods.Items))
	}
	agentTok := podToken(t, e, r.namespace, pods.Items[0].Name, modelsrcapi.Audience)

	status, body := askCredentials(t, base, serverName, ca, agentTok, r.exampleNS, "own")
	var got modelsrcapi.Credentials
	if status != 200 || json.Unmarshal(body, &got) != nil || got.AccessKeyID != "nn-e2e" {
		t.Fatalf("the node agent's token for own (used on its node): %d %q; want its credentials", status, body)
	}
	for _, tc := range []struct {
		name, token, model string
		status             int
		reason             string
	}{
		{"node agent asks for a Model used on another node", agentTok, "remote", 403, modelsrcapi.ReasonNotUsedOnNode},
		{"pod of another ServiceAccount on the node", podToken(t, e, r.exampleNS, "poser", modelsrcapi.Audience), "own", 403, modelsrcapi.ReasonNotNodeAgent},
		{"node agent token for another audience", podToken(t, e, r.namespace, pods.Items[0].Name, "neuronetes.io/toolproxy"), "own", 401, modelsrcapi.ReasonUnauthenticated},
	} {
		status, body := askCredentials(t, base, serverName, ca, tc.token, r.exampleNS, tc.model)
		rf := refusalOf(t, status, body)
		t.Logf("[e2e] %s: %d %s: %s", tc.name, status, rf.Reason, rf.Message)
		if status != tc.status || rf.Reason != tc.reason || strings.Contains(string(body), "nn-e2e-secret-key") {
			t.Errorf("%s: %d %q; want %d %s without credentials", tc.name, status, body, tc.status, tc.reason)
		}
	}
	after, err := e.Kube.CoreV1().Secrets(r.exampleNS).Get(ctx, "a-creds", metav1.GetOptions{})
	if err != nil || after.ResourceVersion != credsBefore.ResourceVersion {
		t.Errorf("the tenant's Secret changed: %v", err)
	}
}
