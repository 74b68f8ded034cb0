package modelsrcapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestClient: the client sends the token file's token as a Bearer token and the Request as JSON
// over TLS trusting only the CA it is given, returns the Credentials, turns a refusal into an
// *Error with its reason, and fails against a server its CA did not sign.
func TestClient(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req Request
		_ = json.NewDecoder(r.Body).Decode(&req)
		if r.URL.Path != Path || r.Header.Get("Authorization") != "Bearer tok-1" || r.Method != http.MethodPost {
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(Refusal{Reason: ReasonUnauthenticated, Message: "bad call"})
			return
		}
		if req.Name != "llama" {
			w.WriteHeader(http.StatusForbidden)
			_ = json.NewEncoder(w).Encode(Refusal{Reason: ReasonNotUsedOnNode, Message: "not here"})
			return
		}
		_ = json.NewEncoder(w).Encode(Credentials{AccessKeyID: "AK", SecretAccessKey: "SK"})
	}))
	defer srv.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte("tok-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &Client{URL: srv.URL, TokenFile: tokFile, CA: func(context.Context) ([]byte, error) { return caPEM, nil }}
	ctx := context.Background()
	got, err := c.Credentials(ctx, Request{Namespace: "a", Name: "llama"})
	if err != nil || got.AccessKeyID != "AK" || got.SecretAccessKey != "SK" {
		t.Fatalf("Credentials = %+v, %v", got, err)
	}
	_, err = c.Credentials(ctx, Request{Namespace: "a", Name: "other"})
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusForbidden || e.Reason != ReasonNotUsedOnNode {
		t.Fatalf("refusal = %v, want an *Error NotUsedOnNode", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other-ca"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	wrongCA := &Client{URL: srv.URL, TokenFile: tokFile, CA: func(context.Context) ([]byte, error) {
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
	}}
	if _, err := wrongCA.Credentials(ctx, Request{Namespace: "a", Name: "llama"}); err == nil {
		t.Fatal("a server the CA did not sign was trusted")
	}
}
