package auth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/internal/egress"
)

func TestParseIssuers(t *testing.T) {
	is, err := ParseIssuers("https://idp.a.example=team-a|team-b, https://shared.example/realms/x")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		iss, ns string
		want    bool
	}{
		{"https://idp.a.example", "team-a", true},
		{"https://idp.a.example", "team-b", true},
		{"https://idp.a.example", "team-c", false},
		{"https://shared.example/realms/x", "anything", true},
		{"https://other.example", "team-a", false},
	} {
		if got := is.Approved(tc.iss, tc.ns); got != tc.want {
			t.Errorf("Approved(%s, %s) = %v", tc.iss, tc.ns, got)
		}
	}
	for _, bad := range []string{"idp.example", "ftp://x", "https://x/?q=1"} {
		if _, err := ParseIssuers(bad); err == nil || !strings.Contains(err.Error(), "--oidc-allowed-issuers") {
			t.Errorf("%q: err %v", bad, err)
		}
	}
}

// TestIssuerApproval: a Tenant of another namespace naming team-a's issuer and audience neither
// gets team-a's tokens nor makes them ambiguous when the admin approved the issuer for team-a's
// namespace only; an issuer nobody approved accepts no token and is never fetched.
func TestIssuerApproval(t *testing.T) {
	is := newIssuer(t)
	teamA := &access.Tenant{Name: "team-a", Namespace: "a"}
	intruder := &access.Tenant{Name: "intruder", Namespace: "evil"}
	d := access.NewDirectory()
	d.OIDC = []access.OIDCBinding{
		{Issuer: is.srv.URL, Audience: "gw", JWKSURI: is.srv.URL + "/jwks", Tenant: teamA},
		{Issuer: is.srv.URL, Audience: "gw", JWKSURI: is.srv.URL + "/jwks", Tenant: intruder},
	}
	tok := is.token(t, is.key, jwt.Claims{Issuer: is.srv.URL, Audience: jwt.Audience{"gw"}, Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))}, nil)
	h := http.Header{"Authorization": {"Bearer " + tok}}
	cl := NewHTTPClient(egress.AllowLoopback())

	scoped := &Authenticator{Dir: access.NewHolder(d), HTTPClient: cl, Issuers: Issuers{is.srv.URL: {"a"}}}
	if got, err := scoped.Authenticate(context.Background(), h); err != nil || got != teamA {
		t.Fatalf("approved for namespace a: got %v, %v; want team-a", got, err)
	}
	none := &Authenticator{Dir: access.NewHolder(d), HTTPClient: cl}
	before := is.hits
	_, err := none.Authenticate(context.Background(), h)
	if err == nil || !strings.Contains(err.Body.Message, "not approved") {
		t.Fatalf("unapproved issuer: %v", err)
	}
	if is.hits != before {
		t.Fatalf("an unapproved issuer was fetched %d times", is.hits-before)
	}
}

// TestStallingIssuerIsNegativelyCached: concurrent tokens of an issuer whose discovery stalls
// share one request, fail by the client's timeout, and later tokens fail at once from the
// failure cache instead of calling the issuer again.
func TestStallingIssuerIsNegativelyCached(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	d := access.NewDirectory()
	d.OIDC = []access.OIDCBinding{{Issuer: srv.URL, Audience: "gw", Tenant: &access.Tenant{Name: "x", Namespace: "n"}}}
	p := egress.AllowLoopback()
	a := &Authenticator{Dir: access.NewHolder(d), Issuers: Issuers{srv.URL: nil}, FailureTTL: time.Minute,
		HTTPClient: p.Client(egress.ClientOptions{Timeout: 300 * time.Millisecond})}
	is := newIssuer(t)
	tok := is.token(t, is.key, jwt.Claims{Issuer: srv.URL, Audience: jwt.Audience{"gw"}, Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))}, nil)
	h := http.Header{"Authorization": {"Bearer " + tok}}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := a.Authenticate(context.Background(), h); err == nil {
				t.Error("accepted a token of a stalling issuer")
			}
		}()
	}
	wg.Wait()
	start := time.Now()
	for range 20 {
		if _, err := a.Authenticate(context.Background(), h); err == nil {
			t.Fatal("accepted")
		}
	}
	if n := calls.Load(); n > 2 {
		t.Fatalf("issuer called %d times for 28 tokens, want 1 (shared, then cached)", n)
	}
	if el := time.Since(start); el > 200*time.Millisecond {
		t.Fatalf("cached failures took %s", el)
	}
}

// TestIssuerEgress: discovery of an issuer on a denied address is refused by the egress policy.
func TestIssuerEgress(t *testing.T) {
	is := newIssuer(t)
	d := access.NewDirectory()
	d.OIDC = []access.OIDCBinding{{Issuer: is.srv.URL, Audience: "gw", Tenant: &access.Tenant{Name: "x", Namespace: "n"}}}
	a := &Authenticator{Dir: access.NewHolder(d), Issuers: Issuers{is.srv.URL: nil}} // default client: zero policy
	tok := is.token(t, is.key, jwt.Claims{Issuer: is.srv.URL, Audience: jwt.Audience{"gw"}, Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))}, nil)
	if _, err := a.Authenticate(context.Background(), http.Header{"Authorization": {"Bearer " + tok}}); err == nil {
		t.Fatal("token accepted through a loopback issuer")
	}
	if is.hits != 0 {
		t.Fatalf("loopback issuer reached %d times", is.hits)
	}
}
