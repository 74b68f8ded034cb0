package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/controller/modelcreds"
	nnwebhook "github.com/neuronetes/neuronetes/controller/webhook"
	"github.com/neuronetes/neuronetes/internal/modelsrcapi"
)

// serveModelSourceCredentials serves the controller's Model source credentials endpoint
// (controller/modelcreds Server) from this process on 127.0.0.1 over TLS, for the ServiceAccount
// ns/nodeagent, from the copies in ns. The CA and serving pair are written to certDir (ca.crt).
// It returns host:port.
func serveModelSourceCredentials(t *testing.T, e *Env, ns, certDir string) string {
	t.Helper()
	if _, err := nnwebhook.EnsureCerts(certDir, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	c := crClient(t, e.Config)
	srv := &modelcreds.Server{Reviews: e.Kube.AuthenticationV1().TokenReviews(), Live: c, Cached: c, Namespace: ns, NodeAgent: ns + "/nodeagent"}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(modelsrcapi.Path, srv)
	hs := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return klog.NewContext(context.Background(), klog.NewKlogr()) }}
	go func() { _ = hs.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = hs.Close() })
	return ln.Addr().String()
}

// podToken returns a token of the pod's ServiceAccount bound to the pod (so the TokenReview names
// the pod and its node) for audience, as the kubelet projects it.
func podToken(t *testing.T, e *Env, ns, pod, audience string) string {
	t.Helper()
	ctx := context.Background()
	p, err := e.Kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	exp := int64(600)
	tr, err := e.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, p.Spec.ServiceAccountName, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{audience}, ExpirationSeconds: &exp,
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of pod %s/%s: %v", ns, pod, err)
	}
	return tr.Status.Token
}

// askCredentials POSTs a credentials request for ns/name to the endpoint at base (https://host:port)
// with token, trusting caPEM for serverName; it returns the HTTP status and the body.
func askCredentials(t *testing.T, base, serverName string, caPEM []byte, token, ns, name string) (int, []byte) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("no CA certificate in %q", caPEM)
	}
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: serverName}}}
	body, _ := json.Marshal(modelsrcapi.Request{Namespace: ns, Name: name})
	req, err := http.NewRequest(http.MethodPost, base+modelsrcapi.Path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", base, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// refusalOf decodes a refusal body; it fails when the body is not one.
func refusalOf(t *testing.T, status int, body []byte) modelsrcapi.Refusal {
	t.Helper()
	var rf modelsrcapi.Refusal
	if err := json.Unmarshal(body, &rf); err != nil || rf.Reason == "" {
		t.Fatalf("status %d body %q: not a refusal (%v)", status, body, errors.Join(err, fmt.Errorf("reason %q", rf.Reason)))
	}
	return rf
}
