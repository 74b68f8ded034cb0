package toolproxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/neuronetes/neuronetes/internal/egress"
)

// grpcIdle is how long a gRPC tool connection may go unused before it is closed (a tool whose
// binding was deleted or changed its endpoint leaves nothing open for long).
const grpcIdle = 10 * time.Minute

// reflectTimeout bounds a reflection lookup of a caller without a deadline.
const reflectTimeout = 30 * time.Second

// grpcConns holds one client connection per gRPC tool endpoint and the method descriptors read
// by reflection. The mutex guards the maps only: dialing is lazy and a reflection lookup runs
// outside it, once per method at a time (singleflight), so a slow tool stalls only its own
// callers.
type grpcConns struct {
	mu     sync.Mutex
	conns  map[string]*grpcConn
	descs  map[string]protoreflect.MethodDescriptor
	flight singleflight.Group
}

type grpcConn struct {
	cc   *grpc.ClientConn
	used time.Time
}

// invokeGRPC converts the JSON arguments to the method's request message (its descriptor is
// read once by server reflection), calls the method with the caller's pool and idempotency key
// as metadata (idempotency-key, x-neuronetes-pool or for a session x-neuronetes-session, as HTTP tools get them as headers) and
// answers the response as JSON.
func (iv *Invokers) invokeGRPC(ctx context.Context, t *Tool, c Caller, idemKey string, args []byte) (Answer, error) {
	conn, md, err := iv.grpc.method(ctx, t, iv.Egress)
	if err != nil {
		return Answer{}, err
	}
	in := dynamicpb.NewMessage(md.Input())
	if err := protojson.Unmarshal(args, in); err != nil {
		return Answer{Status: http.StatusBadRequest, ContentType: "application/json",
			Body: []byte(fmt.Sprintf(`{"error":%q}`, "arguments do not fit "+string(md.Input().FullName())+": "+err.Error()))}, nil
	}
	kv := []string{"x-neuronetes-pool", c.Pool}
	if c.Session != "" {
		kv = []string{"x-neuronetes-session", c.Session}
	}
	if idemKey != "" {
		kv = append(kv, "idempotency-key", idemKey)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	out := dynamicpb.NewMessage(md.Output())
	if err := conn.Invoke(ctx, "/"+strings.TrimPrefix(t.Method, "/"), in, out); err != nil {
		return Answer{}, fmt.Errorf("tool %s: %w", t.Name, err)
	}
	b, err := protojson.Marshal(out)
	if err != nil {
		return Answer{}, fmt.Errorf("tool %s answer: %w", t.Name, err)
	}
	return Answer{Status: http.StatusOK, ContentType: "application/json", Body: b}, nil
}

// method returns the endpoint's connection and the method's descriptor.
func (g *grpcConns) method(ctx context.Context, t *Tool, p *egress.Policy) (*grpc.ClientConn, protoreflect.MethodDescriptor, error) {
	conn, err := g.conn(t, p)
	if err != nil {
		return nil, nil, err
	}
	k := t.Endpoint + " " + t.Method
	g.mu.Lock()
	md := g.descs[k]
	g.mu.Unlock()
	if md != nil {
		return conn, md, nil
	}
	v, err, _ := g.flight.Do(k, func() (any, error) {
		// Shared by every caller waiting on it: not cancelled with the first one, but bounded
		// by its deadline (the tool's timeout).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reflectTimeout)
		if dl, ok := ctx.Deadline(); ok {
			rctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), dl)
		}
		defer cancel()
		md, err := resolveMethod(rctx, conn, t.Method)
		if err == nil {
			g.mu.Lock()
			g.descs[k] = md
			g.mu.Unlock()
		}
		return md, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("tool %s: %w", t.Name, err)
	}
	return conn, v.(protoreflect.MethodDescriptor), nil
}

// conn returns the endpoint's connection (grpc.NewClient dials lazily, so nothing waits on the
// network under the lock) and closes connections idle for grpcIdle.
func (g *grpcConns) conn(t *Tool, p *egress.Policy) (*grpc.ClientConn, error) {
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.conns == nil {
		g.conns, g.descs = map[string]*grpcConn{}, map[string]protoreflect.MethodDescriptor{}
	}
	for ep, c := range g.conns {
		if ep != t.Endpoint && now.Sub(c.used) > grpcIdle {
			g.drop(ep, c)
		}
	}
	if c := g.conns[t.Endpoint]; c != nil {
		c.used = now
		return c.cc, nil
	}
	// passthrough hands the endpoint's host to the egress dialer unresolved, so host-name
	// allowlists apply and the dialer checks every address it resolves.
	target := t.Endpoint
	if !strings.Contains(target, ":///") {
		target = "passthrough:///" + target
	}
	dial := p.Dialer(egress.DefaultDialTimeout)
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return dial(ctx, "tcp", addr) }))
	if err != nil {
		return nil, fmt.Errorf("tool %s endpoint %s: %w", t.Name, t.Endpoint, err)
	}
	g.conns[t.Endpoint] = &grpcConn{cc: cc, used: now}
	return cc, nil
}

// drop closes an endpoint's connection and forgets its descriptors (g.mu held).
func (g *grpcConns) drop(ep string, c *grpcConn) {
	_ = c.cc.Close()
	delete(g.conns, ep)
	for k := range g.descs {
		if strings.HasPrefix(k, ep+" ") {
			delete(g.descs, k)
		}
	}
}

// Close closes every gRPC tool connection.
func (iv *Invokers) Close() {
	g := &iv.grpc
	g.mu.Lock()
	defer g.mu.Unlock()
	for ep, c := range g.conns {
		g.drop(ep, c)
	}
}
