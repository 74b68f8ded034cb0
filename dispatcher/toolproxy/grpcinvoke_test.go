package toolproxy

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/internal/egress"
)

// recordingHealth answers Check and records the metadata of each call.
type recordingHealth struct {
	healthpb.UnimplementedHealthServer
	mu  sync.Mutex
	mds []metadata.MD
}

func (h *recordingHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	h.mu.Lock()
	h.mds = append(h.mds, md)
	h.mu.Unlock()
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// stallingListener accepts connections and never speaks: a gRPC tool whose reflection hangs.
func stallingListener(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return l.Addr().String()
}

func grpcToolOf(t *testing.T, name, endpoint string, timeout v1alpha1.Duration) *Tool {
	t.Helper()
	tool, err := Build(toolBinding(name, "grpc", endpoint, v1alpha1.ToolConfig{Method: "grpc.health.v1.Health/Check", Timeout: timeout}))
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

// TestGRPCToolCalls: the caller's idempotency key and pool reach a gRPC tool as metadata; a tool
// whose reflection stalls holds up only its own callers; Close closes the connections.
func TestGRPCToolCalls(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingHealth{}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, rec)
	reflection.Register(s)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	iv := &Invokers{Egress: egress.AllowLoopback()}
	good := grpcToolOf(t, "good", l.Addr().String(), "5s")
	stall := grpcToolOf(t, "stall", stallingListener(t), "3s")

	stalled := make(chan error, 1)
	go func() {
		// The proxy bounds every call by the tool's timeout; so does this caller.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := iv.Invoke(ctx, stall, Caller{Namespace: "ns", Pool: "agents"}, "", []byte(`{}`))
		stalled <- err
	}()
	time.Sleep(100 * time.Millisecond) // the stalling reflection is under way
	start := time.Now()
	ans, err := iv.Invoke(context.Background(), good, Caller{Namespace: "ns", Pool: "agents"}, "order-7", []byte(`{"service":""}`))
	if err != nil || ans.Status != 200 {
		t.Fatalf("good tool: %v %+v", err, ans)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the good tool waited %v behind the stalling one", d)
	}
	rec.mu.Lock()
	md := rec.mds[len(rec.mds)-1]
	rec.mu.Unlock()
	if got := md.Get("idempotency-key"); len(got) != 1 || got[0] != "order-7" {
		t.Fatalf("idempotency-key metadata %v", got)
	}
	if got := md.Get("x-neuronetes-pool"); len(got) != 1 || got[0] != "agents" {
		t.Fatalf("x-neuronetes-pool metadata %v", got)
	}
	if err := <-stalled; err == nil {
		t.Fatal("the stalling tool answered")
	}
	iv.Close()
	iv.grpc.mu.Lock()
	n := len(iv.grpc.conns)
	iv.grpc.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d connections left open after Close", n)
	}
}

// ttlStore records the TTL of each claim.
type ttlStore struct {
	MemoryIdem
	claims []time.Duration
}

func (s *ttlStore) Claim(ctx context.Context, key, args string, ttl time.Duration) (*Answer, error) {
	s.claims = append(s.claims, ttl)
	return s.MemoryIdem.Claim(ctx, key, args, ttl)
}

// TestProxyClaimsForTheCallOnly: the proxy claims a key for the tool's timeout plus the margin,
// not for the day its answer is kept.
func TestProxyClaimsForTheCallOnly(t *testing.T) {
	srv := httptestServer(t)
	reg := NewRegistry()
	reg.Update(toolBinding("pay", "http", srv, v1alpha1.ToolConfig{SideEffects: true, Timeout: "2s"}))
	st := &ttlStore{}
	p := &Proxy{Registry: reg, Invoker: &Invokers{Egress: egress.AllowLoopback()}, Idem: st, Audit: &Audit{},
		Identity: StaticIdentity{"10.0.0.1": {Namespace: "ns", Pool: "agents", Pod: "agents-0"}}}
	if code := callTool(p, "10.0.0.1", "/v1/tools/ns/pay", `{"amount":1}`, "k1"); code != 200 {
		t.Fatalf("status %d", code)
	}
	if len(st.claims) != 1 || st.claims[0] != ClaimLease(2*time.Second) {
		t.Fatalf("claims %v, want one of %v", st.claims, ClaimLease(2*time.Second))
	}
}

func httptestServer(t *testing.T) string {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(s.Close)
	return s.URL
}

func callTool(p *Proxy, from, path, body, key string) int {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.RemoteAddr = from + ":40000"
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, req)
	return rec.Code
}
