package guard

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/internal/egress"
)

// TestRemoteChecksEgress: presidio and webhook URLs reach only what the egress policy admits:
// a denied IP literal fails to compile naming the field; a name resolving to loopback and a
// redirect from an admitted server are refused when called.
func TestRemoteChecksEgress(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check nnv1.GuardrailCheck
		want  string
	}{
		{"webhook to the metadata server", nnv1.GuardrailCheck{Name: "w", Type: nnv1.GuardrailWebhook, Webhook: &nnv1.WebhookCheck{URL: "http://169.254.169.254/latest"}}, "spec.request[0].webhook.url: egress denied: 169.254.169.254 is a link-local address"},
		{"presidio on loopback", nnv1.GuardrailCheck{Name: "p", Type: nnv1.GuardrailPresidio, Presidio: &nnv1.PresidioCheck{URL: "http://127.0.0.1:3000"}}, "spec.request[0].presidio.url: egress denied"},
		{"webhook not http", nnv1.GuardrailCheck{Name: "w", Type: nnv1.GuardrailWebhook, Webhook: &nnv1.WebhookCheck{URL: "file:///etc/passwd"}}, "want an http(s) URL"},
	} {
		_, err := Compile("x", &nnv1.GuardrailPolicySpec{Request: []nnv1.GuardrailCheck{tc.check}}, CompileOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}

	var hits int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		http.Redirect(w, r, "http://localhost/x", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":"):]
	for _, tc := range []struct {
		name, url string
		pol       *egress.Policy
		want      string
	}{
		{"name resolving to loopback", "http://localhost" + port, nil, "loopback address"},
		{"redirect from an admitted server", srv.URL, &egress.Policy{AllowHosts: []string{"127.0.0.1"}}, "follows no redirects"},
	} {
		p := WebhookPlugin{URL: tc.url, Client: NewClient(tc.pol)}
		_, err := p.Check(context.Background(), userReq("x"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
		if tc.pol == nil && !errors.Is(err, egress.ErrDenied) {
			t.Errorf("%s: err %v is not an egress denial", tc.name, err)
		}
	}
}
