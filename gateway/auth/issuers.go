package auth

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/neuronetes/neuronetes/internal/egress"
)

// Issuers are the OIDC issuers an admin approved (--oidc-allowed-issuers), each for the
// namespaces listed, or for every namespace when none are. A Tenant's spec.oidc binding to an
// issuer not approved for its namespace accepts no token, so a Tenant cannot make another
// namespace's tokens ambiguous by naming the same issuer and audience.
type Issuers map[string][]string

// ParseIssuers reads "ISSUER[=NS|NS...],..." (the issuer URL exactly as tokens carry it in
// "iss"); errors name the flag.
func ParseIssuers(s string) (Issuers, error) {
	out := Issuers{}
	for _, e := range egress.SplitList(s) {
		iss, nss, _ := strings.Cut(e, "=")
		u, err := url.Parse(iss)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("--oidc-allowed-issuers: %q is not an issuer URL (http(s)://host/path, no query)", iss)
		}
		var list []string
		for _, ns := range strings.Split(nss, "|") {
			if ns = strings.TrimSpace(ns); ns != "" {
				list = append(list, ns)
			}
		}
		out[iss] = append(out[iss], list...)
	}
	return out, nil
}

// Approved reports whether a Tenant in namespace may bind issuer.
func (is Issuers) Approved(issuer, namespace string) bool {
	nss, ok := is[issuer]
	return ok && (len(nss) == 0 || slices.Contains(nss, namespace))
}

// oidcTimeout bounds one discovery or JWKS request.
const oidcTimeout = 10 * time.Second

// NewHTTPClient returns the client discovery and JWKS requests use: dials through p (issuers
// and JWKS URIs are user-chosen), follows at most 3 redirects, bounds each request.
func NewHTTPClient(p *egress.Policy) *http.Client {
	return p.Client(egress.ClientOptions{Timeout: oidcTimeout, MaxRedirects: 3})
}

// defaultHTTPClient is used without Authenticator.HTTPClient: public addresses only.
var defaultHTTPClient = NewHTTPClient(nil)
