package toolproxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"

	"github.com/neuronetes/neuronetes/internal/egress"
)

// TestToolEgress: a ToolBinding endpoint (whose answer goes back to the caller) reaches only
// what the egress policy admits; an admitted tool may not redirect; gRPC tools dial through
// the same policy.
func TestToolEgress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
			return
		}
		w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	reflection.Register(gs)
	go gs.Serve(l)
	defer gs.Stop()
	for _, tc := range []struct {
		name   string
		tool   Tool
		pol    *egress.Policy
		denied string // "" = answered 200
	}{
		{"metadata server", Tool{Name: "t", Type: "http", Method: "GET", Endpoint: "http://169.254.169.254/latest/meta-data/"}, egress.AllowLoopback(), "link-local"},
		{"loopback by default", Tool{Name: "t", Type: "http", Method: "POST", Endpoint: srv.URL}, nil, "loopback"},
		{"loopback admitted", Tool{Name: "t", Type: "http", Method: "POST", Endpoint: srv.URL}, egress.AllowLoopback(), ""},
		{"admitted tool redirects", Tool{Name: "t", Type: "http", Method: "GET", Endpoint: srv.URL + "/redirect"}, egress.AllowLoopback(), "follows no redirects"},
		{"grpc on loopback by default", Tool{Name: "g", Type: "grpc", Method: "grpc.health.v1.Health/Check", Endpoint: l.Addr().String()}, nil, "loopback"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			iv := &Invokers{Egress: tc.pol}
			ans, err := iv.Invoke(ctx, &tc.tool, Caller{Pool: "p"}, "", []byte(`{}`))
			if tc.denied == "" {
				if err != nil || ans.Status != 200 {
					t.Fatalf("answer %+v, %v", ans, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.denied) {
				t.Fatalf("answer %+v, err %v; want refused (%s)", ans, err, tc.denied)
			}
			if tc.denied != "follows no redirects" && !errors.Is(err, egress.ErrDenied) && !strings.Contains(err.Error(), "egress denied") {
				t.Fatalf("err %v is not an egress denial", err)
			}
		})
	}
}
