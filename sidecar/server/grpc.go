package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sidecarv1 "github.com/neuronetes/neuronetes/sidecar/api/v1"
	"github.com/neuronetes/neuronetes/sidecar/frame"
	"github.com/neuronetes/neuronetes/sidecar/keys"
	"github.com/neuronetes/neuronetes/sidecar/store"
)

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

// GRPC serves the Sessions service of sidecar/api/v1/sidecar.proto with
// the generated protobuf code.
type GRPC struct {
	sidecarv1.UnimplementedSessionsServer
	s *Server
}

var _ sidecarv1.SessionsServer = (*GRPC)(nil)

// GRPC returns the gRPC service implementation; register it with
// sidecarv1.RegisterSessionsServer(grpcServer, srv.GRPC()).
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

// ifVersion returns the store's condition for an optional if_version: -1
// when absent (unconditional).
func ifVersion(p *int64) (int64, error) {
	switch {
	case p == nil:
		return -1, nil
	case *p < 0:
		return 0, fmt.Errorf("if_version %d: %w", *p, errBadRequest)
	}
	return *p, nil
}

// Get implements sidecarv1.SessionsServer.
func (g *GRPC) Get(ctx context.Context, r *sidecarv1.GetRequest) (*sidecarv1.Session, error) {
	start := time.Now()
	sess, err := g.s.store.Get(ctx, r.GetConversationId())
	if err != nil {
		return nil, g.done("session_get", start, err)
	}
	return &sidecarv1.Session{ConversationId: r.GetConversationId(), Version: sess.Version, Data: sess.Data}, g.done("session_get", start, nil)
}

// Put implements sidecarv1.SessionsServer.
func (g *GRPC) Put(ctx context.Context, r *sidecarv1.PutRequest) (*sidecarv1.WriteReply, error) {
	start := time.Now()
	ttl, err := ttlOf(r.GetTtlSeconds())
	if err != nil {
		return nil, g.done("session_put", start, err)
	}
	cond, err := ifVersion(r.IfVersion)
	if err != nil {
		return nil, g.done("session_put", start, err)
	}
	v, err := g.s.store.Put(ctx, r.GetConversationId(), r.GetData(), cond, ttl)
	if err != nil {
		return nil, g.done("session_put", start, err)
	}
	return &sidecarv1.WriteReply{Version: v}, g.done("session_put", start, nil)
}

// Append implements sidecarv1.SessionsServer.
func (g *GRPC) Append(ctx context.Context, r *sidecarv1.AppendRequest) (*sidecarv1.WriteReply, error) {
	start := time.Now()
	ttl, err := ttlOf(r.GetTtlSeconds())
	if err != nil {
		return nil, g.done("session_append", start, err)
	}
	if len(r.GetTurn()) > g.s.store.MaxSize() {
		return nil, g.done("session_append", start, fmt.Errorf("turn %d bytes: %w", len(r.GetTurn()), store.ErrTooLarge))
	}
	v, err := g.s.store.Append(ctx, r.GetConversationId(), r.GetTurn(), ttl)
	if err != nil {
		return nil, g.done("session_append", start, err)
	}
	return &sidecarv1.WriteReply{Version: v}, g.done("session_append", start, nil)
}

// Delete implements sidecarv1.SessionsServer.
func (g *GRPC) Delete(ctx context.Context, r *sidecarv1.DeleteRequest) (*sidecarv1.WriteReply, error) {
	start := time.Now()
	cond, err := ifVersion(r.IfVersion)
	if err == nil {
		err = g.s.store.Delete(ctx, r.GetConversationId(), cond)
	}
	if err != nil {
		return nil, g.done("session_delete", start, err)
	}
	return &sidecarv1.WriteReply{}, g.done("session_delete", start, nil)
}
