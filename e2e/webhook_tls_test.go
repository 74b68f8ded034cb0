package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestControllerWebhookTwoReplicas runs two controller processes that share the webhook's CA and
// serving pair through one Secret (--webhook-cert-secret). The second replica's start leaves the
// registered caBundle unchanged, both replicas' endpoints verify against that bundle (so the
// apiserver, with failurePolicy Fail, accepts whichever answers), and a pod created afterwards is
// injected. With a CA per replica, the second start would replace the bundle and the first
// replica's certificate would no longer verify.
func TestControllerWebhookTwoReplicas(t *testing.T) {
	e := requireEnv(t)
	ctrlInstallCRDs(t, e)
	ns := e.Namespace(t, "ctrl-tls")
	agentImg := e.Image(t, "demo-agent", "./cmd/demo-agent")
	shared := "--webhook-cert-secret=" + ns + "/webhook-tls"
	standin := "--listen=127.0.0.1:7070 --model=sidecar-standin"
	a := startController(t, e, ns, agentImg, standin, shared)
	cfgName := "neuronetes-sidecar-e2e-" + ns
	bundle := func() []byte {
		cfg, err := e.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), cfgName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Webhooks[0].ClientConfig.CABundle
	}
	first := bundle()
	b := startController(t, e, ns, agentImg, standin, shared)
	if second := bundle(); string(second) != string(first) {
		t.Fatal("the second replica replaced the registered caBundle")
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(first) {
		t.Fatal("the registered caBundle holds no certificate")
	}
	for name, c := range map[string]*ctrlProc{"first": a, "second": b} {
		addr := strings.TrimPrefix(webhookURL(c), "https://")
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatalf("the %s replica's webhook (%s) does not verify against the registered caBundle: %v", name, addr, err)
		}
		conn.Close()
	}
	sec, err := e.Kube.CoreV1().Secrets(ns).Get(context.Background(), "webhook-tls", metav1.GetOptions{})
	if err != nil || len(sec.Data["ca.key"]) == 0 || string(sec.Data["ca.crt"]) != string(first) {
		t.Fatalf("shared Secret: %v (keys %d)", err, len(sec.Data))
	}
	e.Apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: injected
  labels: {neuronetes.io/inject-sidecar: "true"}
spec:
  containers:
  - name: agent
    image: %s
    imagePullPolicy: Never
`, agentImg))
	p, err := e.Kube.CoreV1().Pods(ns).Get(context.Background(), "injected", metav1.GetOptions{})
	if err != nil || !hasContainer(p, "neuronetes-sidecar") {
		t.Fatalf("pod created with two replicas sharing the pair: injected=%v (%v)", p != nil && hasContainer(p, "neuronetes-sidecar"), err)
	}
	_ = e.Kube.CoreV1().Pods(ns).Delete(context.Background(), "injected", metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	t.Logf("[e2e] two replicas share one CA (%d bytes of caBundle); both endpoints verify; pod injected", len(first))
}

// webhookURL returns the --webhook-url a controller process was started with.
func webhookURL(c *ctrlProc) string {
	for i, a := range c.args {
		if a == "--webhook-url" && i+1 < len(c.args) {
			return c.args[i+1]
		}
	}
	return ""
}
