package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/scaleapi"
	nnwebhook "github.com/neuronetes/neuronetes/controller/webhook"
)

func TestAutoscalerFlags(t *testing.T) {
	dir := t.TempDir()
	tokFile, emptyFile, oldFile := filepath.Join(dir, "tokens"), filepath.Join(dir, "empty"), filepath.Join(dir, "old")
	for f, b := range map[string]string{tokFile: "agents s3cret\n", emptyFile: "", oldFile: "s3cret\n"} {
		if err := os.WriteFile(f, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name       string
		args       []string
		wantTokens bool
		wantErr    string // substring; empty means success
	}{
		{"defaults need a tokens file", nil, false, "--scale-webhook-tokens-file is required"},
		{"webhook disabled", []string{"--scale-webhook-addr="}, false, ""},
		{"autoscaler off ignores the webhook", []string{"--autoscaler=false"}, false, ""},
		{"tokens read", []string{"--scale-webhook-tokens-file", tokFile}, true, ""},
		{"missing tokens file", []string{"--scale-webhook-tokens-file", filepath.Join(dir, "nope")}, false, "--scale-webhook-tokens-file"},
		{"empty tokens file", []string{"--scale-webhook-tokens-file", emptyFile}, false, "no token"},
		{"a bare token has no namespace scope", []string{"--scale-webhook-tokens-file", oldFile}, false, "line 1: want"},
		{"bad addr", []string{"--scale-webhook-addr", "localhost", "--scale-webhook-tokens-file", tokFile}, false, "--scale-webhook-addr"},
		{"zero sync period", []string{"--scale-webhook-addr=", "--autoscaler-sync-period=0s"}, false, "--autoscaler-sync-period"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var a autoscalerOptions
			fs := flag.NewFlagSet("controller", flag.ContinueOnError)
			a.addFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			toks, err := a.validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
			case (toks != nil) != tc.wantTokens:
				t.Fatalf("tokens %v, want some: %v", toks, tc.wantTokens)
			}
		})
	}
}

// TestServeScaleWebhook checks TLS (the pair from the cert dir, verified by its CA), the served
// path, the namespace-scoped token, 404 for an unknown pool, the stored override, and the
// shutdown on cancel.
func TestServeScaleWebhook(t *testing.T) {
	certDir := t.TempDir()
	caPEM, err := nnwebhook.EnsureCerts(certDir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(s)
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(&v1alpha1.AgentPool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
		Spec: v1alpha1.AgentPoolSpec{Autoscaling: &v1alpha1.AutoscalingSpec{}}}).Build()
	toks, err := scaleapi.ParseTokens([]byte("ns tok\nother tok2\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serveTLS(ctx, "scale webhook", "--scale-webhook", addr, certDir, ScaleWebhookPath, &scaleapi.Handler{Tokens: toks, Client: c})
	}()
	post := func(scheme, path, token, body string) (int, error) {
		req, _ := http.NewRequest(http.MethodPost, scheme+"://"+addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	body := `{"pool":"p","replicas":3}`
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := post("https", ScaleWebhookPath, "wrong", body); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("webhook never served: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, err := post("http", ScaleWebhookPath, "tok", body); err == nil && code == http.StatusAccepted {
		t.Fatal("plain HTTP accepted")
	}
	for _, tc := range []struct {
		path, token, body string
		want              int
	}{
		{ScaleWebhookPath, "wrong", body, http.StatusUnauthorized},
		{"/other", "tok", body, http.StatusNotFound},
		{ScaleWebhookPath, "tok2", body, http.StatusNotFound}, // its namespace has no pool p
		{ScaleWebhookPath, "tok2", `{"pool":"p","namespace":"ns","replicas":3}`, http.StatusForbidden},
		{ScaleWebhookPath, "tok", `{"pool":"nope","replicas":3}`, http.StatusNotFound},
		{ScaleWebhookPath, "tok", body, http.StatusAccepted},
	} {
		if got, err := post("https", tc.path, tc.token, tc.body); err != nil || got != tc.want {
			t.Errorf("POST %s with token %q %s: %d %v, want %d", tc.path, tc.token, tc.body, got, err, tc.want)
		}
	}
	var p v1alpha1.AgentPool
	if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "p"}, &p); err != nil {
		t.Fatal(err)
	}
	if o, live, err := scaleapi.FromPool(&p, time.Now()); err != nil || !live || o.Replicas != 3 {
		t.Errorf("override not stored: %+v %v %v", o, live, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("webhook did not stop after cancel")
	}
}
