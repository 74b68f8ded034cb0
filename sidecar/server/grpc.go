package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"

	"github.com/neuronetes/neuronetes/sidecar/frame"
	"github.com/neuronetes/neuronetes/sidecar/keys"
	"github.com/neuronetes/neuronetes/sidecar/store"
)

// JSONCodec is the gRPC codec of the Sessions service: messages are JSON.
type JSONCodec struct{}

// Name returns the content-subtype, "json".
func (JSONCodec) Name() string { return "json" }

// Marshal encodes v as JSON (see grpccodec.go for the messages carrying a
// session or turn).
func (JSONCodec) Marshal(v any) ([]byte, error) { return marshalMessage(v) }

// Unmarshal decodes JSON into v, with the same result as encoding/json.
func (JSONCodec) Unmarshal(b []byte, v any) error { return unmarshalMessage(b, v) }

func init() { encoding.RegisterCodec(JSONCodec{}) }

// GetRequest asks for one session.
type GetRequest struct {
	ConversationID string `json:"conversation_id"`
}

// SessionReply is a session and its version.
type SessionReply struct {
	ConversationID string          `json:"conversation_id"`
	Version        int64           `json:"version"`
	Data           json.RawMessage `json:"data"`
}

// PutRequest writes a session; IfVersion nil is unconditional, 0 create-only.
type PutRequest struct {
	ConversationID string          `json:"conversation_id"`
	Data           json.RawMessage `json:"data"`
	IfVersion      *int64          `json:"if_version,omitempty"`
	TTLSeconds     int64           `json:"ttl_seconds,omitempty"`
}

// AppendRequest appends one turn.
type AppendRequest struct {
	ConversationID string          `json:"conversation_id"`
	Turn           json.RawMessage `json:"turn"`
	TTLSeconds     int64           `json:"ttl_seconds,omitempty"`
}

// DeleteRequest deletes a session; IfVersion nil is unconditional.
type DeleteRequest struct {
	ConversationID string `json:"conversation_id"`
	IfVersion      *int64 `json:"if_version,omitempty"`
}

// WriteReply carries the version after a write.
type WriteReply struct {
	Version int64 `json:"version"`
}

// SessionsServer is the gRPC Sessions service.
type SessionsServer interface {
	Get(context.Context, *GetRequest) (*SessionReply, error)
	Put(context.Context, *PutRequest) (*WriteReply, error)
	Append(context.Context, *AppendRequest) (*WriteReply, error)
	Delete(context.Context, *DeleteRequest) (*WriteReply, error)
}

func unary[Req any, Resp any](name string, call func(SessionsServer, context.Context, *Req) (*Resp, error)) grpc.MethodDesc {
	return grpc.MethodDesc{MethodName: name, Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(Req)
		if err := dec(in); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "decode %s request: %v", name, err)
		}
		h := func(ctx context.Context, req any) (any, error) { return call(srv.(SessionsServer), ctx, req.(*Req)) }
		if ic == nil {
			return h(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + ServiceName + "/" + name}, h)
	}}
}

// ServiceName is the fully qualified gRPC service name.
const ServiceName = "neuronetes.sidecar.v1.Sessions"

// ServiceDesc describes the Sessions service for grpc.Server.RegisterService.
var ServiceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*SessionsServer)(nil),
	Methods: []grpc.MethodDesc{
		unary("Get", SessionsServer.Get),
		unary("Put", SessionsServer.Put),
		unary("Append", SessionsServer.Append),
		unary("Delete", SessionsServer.Delete),
	},
	Metadata: "sidecar/server/sidecar.proto",
}

// grpcCode maps store errors onto gRPC status codes.
func grpcCode(err error) codes.Code {
	switch {
	case errors.Is(err, frame.ErrAuth), errors.Is(err, frame.ErrMalformed), errors.Is(err, keys.ErrUnknownKey):
		return codes.DataLoss
	case errors.Is(err, store.ErrConflict):
		return codes.Aborted
	}
	switch httpStatus(err) {
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusRequestEntityTooLarge:
		return codes.ResourceExhausted
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusServiceUnavailable:
		return codes.Unavailable
	case http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	}
	return codes.Internal
}

// GRPC adapts the Server to the SessionsServer interface.
type GRPC struct{ s *Server }

// GRPC returns the gRPC service implementation; register it with
// grpcServer.RegisterService(&ServiceDesc, srv.GRPC()).
func (s *Server) GRPC() *GRPC { return &GRPC{s: s} }

func (g *GRPC) done(op string, start time.Time, err error) error {
	if g.s.metrics != nil {
		code := codes.OK
		if err != nil {
			code = grpcCode(err)
		}
		g.s.metrics.RequestLatency.WithLabelValues(op).Observe(time.Since(start).Seconds())
		g.s.metrics.Requests.WithLabelValues("grpc", op, strconv.Itoa(int(code))).Inc()
	}
	if err == nil {
		return nil
	}
	return status.Error(grpcCode(err), err.Error())
}

func ttlOf(sec int64) (time.Duration, error) {
	if sec < 0 || sec > 1<<32 {
		return 0, fmt.Errorf("ttl_seconds %d: %w", sec, errBadRequest)
	}
	return time.Duration(sec) * time.Second, nil
}

func versionOf(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}

// Get implements SessionsServer.
func (g *GRPC) Get(ctx context.Context, r *GetRequest) (*SessionReply, error) {
	start := time.Now()
	sess, err := g.s.store.Get(ctx, r.ConversationID)
	if err != nil {
		return nil, g.done("session_get", start, err)
	}
	return &SessionReply{ConversationID: r.ConversationID, Version: sess.Version, Data: sess.Data}, g.done("session_get", start, nil)
}

// Put implements SessionsServer.
func (g *GRPC) Put(ctx context.Context, r *PutRequest) (*WriteReply, error) {
	start := time.Now()
	ttl, err := ttlOf(r.TTLSeconds)
	if err != nil {
		return nil, g.done("session_put", start, err)
	}
	if v := versionOf(r.IfVersion); r.IfVersion != nil && v < 0 {
		return nil, g.done("session_put", start, fmt.Errorf("if_version %d: %w", v, errBadRequest))
	}
	v, err := g.s.store.Put(ctx, r.ConversationID, r.Data, versionOf(r.IfVersion), ttl)
	if err != nil {
		return nil, g.done("session_put", start, err)
	}
	return &WriteReply{Version: v}, g.done("session_put", start, nil)
}

// Append implements SessionsServer.
func (g *GRPC) Append(ctx context.Context, r *AppendRequest) (*WriteReply, error) {
	start := time.Now()
	ttl, err := ttlOf(r.TTLSeconds)
	if err != nil {
		return nil, g.done("session_append", start, err)
	}
	if len(r.Turn) > g.s.store.MaxSize() {
		return nil, g.done("session_append", start, fmt.Errorf("turn %d bytes: %w", len(r.Turn), store.ErrTooLarge))
	}
	v, err := g.s.store.Append(ctx, r.ConversationID, r.Turn, ttl)
	if err != nil {
		return nil, g.done("session_append", start, err)
	}
	return &WriteReply{Version: v}, g.done("session_append", start, nil)
}

// Delete implements SessionsServer.
func (g *GRPC) Delete(ctx context.Context, r *DeleteRequest) (*WriteReply, error) {
	start := time.Now()
	err := g.s.store.Delete(ctx, r.ConversationID, versionOf(r.IfVersion))
	return &WriteReply{}, g.done("session_delete", start, err)
}

// SessionsClient is a client of the Sessions service.
type SessionsClient struct{ cc grpc.ClientConnInterface }

// NewSessionsClient returns a client over cc; calls use the JSON codec.
func NewSessionsClient(cc grpc.ClientConnInterface) *SessionsClient { return &SessionsClient{cc: cc} }

func invoke[Resp any](ctx context.Context, c *SessionsClient, method string, in any) (*Resp, error) {
	out := new(Resp)
	if err := c.cc.Invoke(ctx, "/"+ServiceName+"/"+method, in, out, grpc.CallContentSubtype("json")); err != nil {
		return nil, err
	}
	return out, nil
}

// Get calls Sessions.Get.
func (c *SessionsClient) Get(ctx context.Context, in *GetRequest) (*SessionReply, error) {
	return invoke[SessionReply](ctx, c, "Get", in)
}

// Put calls Sessions.Put.
func (c *SessionsClient) Put(ctx context.Context, in *PutRequest) (*WriteReply, error) {
	return invoke[WriteReply](ctx, c, "Put", in)
}

// Append calls Sessions.Append.
func (c *SessionsClient) Append(ctx context.Context, in *AppendRequest) (*WriteReply, error) {
	return invoke[WriteReply](ctx, c, "Append", in)
}

// Delete calls Sessions.Delete.
func (c *SessionsClient) Delete(ctx context.Context, in *DeleteRequest) (*WriteReply, error) {
	return invoke[WriteReply](ctx, c, "Delete", in)
}
