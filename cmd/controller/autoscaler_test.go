package main

import (
	"context"
	"flag"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/neuronetes/neuronetes/controller/scaleapi"
)

func TestAutoscalerFlags(t *testing.T) {
	dir := t.TempDir()
	tokFile, emptyFile := filepath.Join(dir, "token"), filepath.Join(dir, "empty")
	if err := os.WriteFile(tokFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(emptyFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		args      []string
		wantToken string
		wantErr   string // substring; empty means success
	}{
		{"defaults need a token file", nil, "", "--scale-webhook-token-file is required"},
		{"webhook disabled", []string{"--scale-webhook-addr="}, "", ""},
		{"autoscaler off ignores the webhook", []string{"--autoscaler=false"}, "", ""},
		{"token read and trimmed", []string{"--scale-webhook-token-file", tokFile}, "s3cret", ""},
		{"missing token file", []string{"--scale-webhook-token-file", filepath.Join(dir, "nope")}, "", "--scale-webhook-token-file"},
		{"empty token file", []string{"--scale-webhook-token-file", emptyFile}, "", "--scale-webhook-token-file"},
		{"bad addr", []string{"--scale-webhook-addr", "localhost", "--scale-webhook-token-file", tokFile}, "", "--scale-webhook-addr"},
		{"zero sync period", []string{"--scale-webhook-addr=", "--autoscaler-sync-period=0s"}, "", "--autoscaler-sync-period"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var a autoscalerOptions
			fs := flag.NewFlagSet("controller", flag.ContinueOnError)
			a.addFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			tok, err := a.validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
			case tok != tc.wantToken:
				t.Fatalf("token %q, want %q", tok, tc.wantToken)
			}
		})
	}
}

// TestServeScaleWebhook checks the served path, the bearer token and the shutdown on cancel.
func TestServeScaleWebhook(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ov := &scaleapi.Overrides{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serveScaleWebhook(ctx, addr, &scaleapi.Handler{Token: "tok", DefaultNamespace: "ns", Store: ov})
	}()
	post := func(path, token string) (int, error) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(`{"pool":"p","replicas":3}`))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := post(ScaleWebhookPath, "wrong"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("webhook never served: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{ScaleWebhookPath, "wrong", http.StatusUnauthorized},
		{"/other", "tok", http.StatusNotFound},
		{ScaleWebhookPath, "tok", http.StatusAccepted},
	} {
		if got, err := post(tc.path, tc.token); err != nil || got != tc.want {
			t.Errorf("POST %s with token %q: %d %v, want %d", tc.path, tc.token, got, err, tc.want)
		}
	}
	if o := ov.Get(types.NamespacedName{Namespace: "ns", Name: "p"}, time.Now()); o == nil || o.Replicas != 3 {
		t.Errorf("override not stored: %+v", o)
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
