package auth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/internal/egress"
)

type issuer struct {
	srv  *httptest.Server
	key  *rsa.PrivateKey
	hits int
}

func newIssuer(t *testing.T) *issuer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is := &issuer{key: k}
	mux := http.NewServeMux()
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		is.hits++
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &k.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": is.srv.URL, "jwks_uri": is.srv.URL + "/jwks",
			"id_token_signing_alg_values_supported": []string{"RS256"}})
	})
	is.srv = httptest.NewServer(mux)
	t.Cleanup(is.srv.Close)
	return is
}

func (is *issuer) token(t *testing.T, key *rsa.PrivateKey, c jwt.Claims, extra map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	b := jwt.Signed(s).Claims(c)
	if extra != nil {
		b = b.Claims(extra)
	}
	tok, err := b.Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestAuthenticate(t *testing.T) {
	is := newIssuer(t)
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	teamA := &access.Tenant{Name: "team-a", Namespace: "ns"}
	teamB := &access.Tenant{Name: "team-b", Namespace: "ns"}
	robot := &access.Tenant{Name: "robot", Namespace: "ns"}
	d := access.NewDirectory()
	h, _ := access.ParseStoredKey("sk-team-a-123")
	_ = d.AddKey(h, teamA)
	pre, _ := access.ParseStoredKey("sha256:" + access.HashKey("sk-stored-hashed"))
	_ = d.AddKey(pre, teamB)
	d.OIDC = []access.OIDCBinding{
		{Issuer: is.srv.URL, Audience: "gateway", JWKSURI: is.srv.URL + "/jwks", Claim: "team", Values: []string{"a"}, Tenant: teamA},
		{Issuer: is.srv.URL, Audience: "gateway", JWKSURI: is.srv.URL + "/jwks", Claim: "team", Tenant: teamB}, // value: the tenant's name
		{Issuer: is.srv.URL, Audience: "batch", Tenant: robot},                                                 // discovery
	}
	a := &Authenticator{Dir: access.NewHolder(d), HTTPClient: NewHTTPClient(egress.AllowLoopback()), Issuers: Issuers{is.srv.URL: nil}}
	now := time.Now()
	valid := func(aud string, extra map[string]any) string {
		return is.token(t, is.key, jwt.Claims{Issuer: is.srv.URL, Subject: "u1", Audience: jwt.Audience{aud},
			Expiry: jwt.NewNumericDate(now.Add(time.Hour)), IssuedAt: jwt.NewNumericDate(now)}, extra)
	}
	tests := []struct {
		name    string
		header  map[string]string
		want    *access.Tenant
		code    string
		message string
	}{
		{"api key bearer", map[string]string{"Authorization": "Bearer sk-team-a-123"}, teamA, "", ""},
		{"api key header", map[string]string{"X-Api-Key": "sk-team-a-123"}, teamA, "", ""},
		{"pre-hashed key", map[string]string{"Authorization": "Bearer sk-stored-hashed"}, teamB, "", ""},
		{"bad key", map[string]string{"Authorization": "Bearer sk-wrong"}, nil, "invalid_api_key", "invalid API key"},
		{"no credential", nil, nil, "missing_api_key", "no credential"},
		{"basic auth", map[string]string{"Authorization": "Basic dXNlcjpwYXNz"}, nil, "invalid_authorization", "Bearer"},
		{"jwt claim a", map[string]string{"Authorization": "Bearer " + valid("gateway", map[string]any{"team": "a"})}, teamA, "", ""},
		{"jwt claim array", map[string]string{"Authorization": "Bearer " + valid("gateway", map[string]any{"team": []string{"x", "team-b"}})}, teamB, "", ""},
		{"jwt discovery", map[string]string{"Authorization": "Bearer " + valid("batch", nil)}, robot, "", ""},
		{"expired jwt", map[string]string{"Authorization": "Bearer " + is.token(t, is.key, jwt.Claims{Issuer: is.srv.URL,
			Audience: jwt.Audience{"gateway"}, Expiry: jwt.NewNumericDate(now.Add(-time.Minute))}, map[string]any{"team": "a"})},
			nil, "token_expired", "token expired"},
		{"wrong audience", map[string]string{"Authorization": "Bearer " + valid("someone-else", map[string]any{"team": "a"})}, nil, "invalid_token", "wrong audience"},
		{"bad signature", map[string]string{"Authorization": "Bearer " + is.token(t, other, jwt.Claims{Issuer: is.srv.URL,
			Audience: jwt.Audience{"gateway"}, Expiry: jwt.NewNumericDate(now.Add(time.Hour))}, map[string]any{"team": "a"})},
			nil, "invalid_token", "bad signature"},
		{"unknown issuer", map[string]string{"Authorization": "Bearer " + is.token(t, is.key, jwt.Claims{Issuer: "https://elsewhere.example",
			Audience: jwt.Audience{"gateway"}, Expiry: jwt.NewNumericDate(now.Add(time.Hour))}, nil)},
			nil, "invalid_token", "no tenant trusts"},
		{"claim matches no tenant", map[string]string{"Authorization": "Bearer " + valid("gateway", map[string]any{"team": "c"})}, nil, "invalid_token", "no tenant trusts"},
		{"malformed jwt", map[string]string{"Authorization": "Bearer eyJhbGciOiJSUzI1NiJ9.!!!.sig"}, nil, "invalid_token", "base64url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			got, err := a.Authenticate(context.Background(), h)
			if tt.want != nil {
				if err != nil || got != tt.want {
					t.Fatalf("got %v, %v; want tenant %s", got, err, tt.want.Name)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted as %s", got.Key())
			}
			if err.Status != 401 || err.Body.Code == nil || *err.Body.Code != tt.code || !strings.Contains(err.Body.Message, tt.message) {
				t.Fatalf("error %d %v %q; want 401 %s containing %q", err.Status, *err.Body.Code, err.Body.Message, tt.code, tt.message)
			}
			// The body never names tenants or models.
			for _, leak := range []string{"team-a", "team-b", "robot"} {
				if strings.Contains(string(err.JSON()), leak) {
					t.Fatalf("error body names %s: %s", leak, err.JSON())
				}
			}
		})
	}
}

func TestAmbiguousToken(t *testing.T) {
	is := newIssuer(t)
	d := access.NewDirectory()
	d.OIDC = []access.OIDCBinding{
		{Issuer: is.srv.URL, Audience: "gw", JWKSURI: is.srv.URL + "/jwks", Tenant: &access.Tenant{Name: "x"}},
		{Issuer: is.srv.URL, Audience: "gw", JWKSURI: is.srv.URL + "/jwks", Tenant: &access.Tenant{Name: "y"}},
	}
	a := &Authenticator{Dir: access.NewHolder(d), HTTPClient: NewHTTPClient(egress.AllowLoopback()), Issuers: Issuers{is.srv.URL: nil}}
	tok := is.token(t, is.key, jwt.Claims{Issuer: is.srv.URL, Audience: jwt.Audience{"gw"}, Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))}, nil)
	h := http.Header{"Authorization": {"Bearer " + tok}}
	if _, err := a.Authenticate(context.Background(), h); err == nil || *err.Body.Code != "ambiguous_token" {
		t.Fatalf("ambiguous token: %v", err)
	}
	if is.hits != 1 {
		t.Fatalf("JWKS fetched %d times for one issuer/audience, want 1 (verified once, cached)", is.hits)
	}
}

func TestParseStoredKey(t *testing.T) {
	if _, err := access.ParseStoredKey("sha256:abc"); err == nil {
		t.Fatal("short hash accepted")
	}
	if _, err := access.ParseStoredKey("sha256:" + strings.Repeat("z", 64)); err == nil {
		t.Fatal("non-hex hash accepted")
	}
	if _, err := access.ParseStoredKey("  \n"); err == nil {
		t.Fatal("empty key accepted")
	}
	h1, _ := access.ParseStoredKey("sk-1\n")
	if h1 != access.HashKey("sk-1") {
		t.Fatal("trailing newline not trimmed")
	}
}

func TestExpiry(t *testing.T) {
	is := newIssuer(t)
	exp := time.Unix(1900000000, 0)
	for _, tc := range []struct {
		name, cred string
		want       time.Time
		ok         bool
	}{
		{"jwt with exp", is.token(t, is.key, jwt.Claims{Issuer: is.srv.URL, Expiry: jwt.NewNumericDate(exp)}, nil), exp, true},
		{"jwt without exp", is.token(t, is.key, jwt.Claims{Issuer: is.srv.URL}, nil), time.Time{}, false},
		{"api key", "sk-abcdef", time.Time{}, false},
		{"none", "", time.Time{}, false},
	} {
		h := http.Header{}
		if tc.cred != "" {
			h.Set("Authorization", "Bearer "+tc.cred)
		}
		got, ok := Expiry(h)
		if ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("%s: Expiry = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
