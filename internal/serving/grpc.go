package serving

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// GRPCPolicy is the connection policy of one gRPC server. A zero duration takes gRPC's default
// for that field.
type GRPCPolicy struct {
	// MinPingInterval is the shortest interval between client pings the server tolerates; a
	// client that pings more often is sent GOAWAY (too_many_pings) and disconnected.
	MinPingInterval time.Duration
	// PermitPingsWithoutStream allows pings on a connection with no open stream (at most one per
	// MinPingInterval); otherwise they count as too many.
	PermitPingsWithoutStream bool
	// MaxConnectionIdle closes a connection with no open stream for this long.
	MaxConnectionIdle time.Duration
	// PingInterval: a connection silent for this long is pinged by the server, and closed when
	// the answer takes PingTimeout.
	PingInterval, PingTimeout time.Duration
	// MaxConcurrentStreams bounds the open streams of one connection.
	MaxConcurrentStreams uint32
}

// GRPC is the gRPC policy of NeuroNetes servers: pings at most every 10 s (gRPC clients cannot
// be configured to ping more often), idle connections closed after 5 minutes, dead peers found
// within a minute and a half, 100 streams per connection.
func GRPC() GRPCPolicy {
	return GRPCPolicy{MinPingInterval: 10 * time.Second, PermitPingsWithoutStream: true, MaxConnectionIdle: 5 * time.Minute,
		PingInterval: time.Minute, PingTimeout: 20 * time.Second, MaxConcurrentStreams: 100}
}

// ServerOptions returns the grpc.NewServer options that apply the policy.
func (p GRPCPolicy) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: p.MinPingInterval, PermitWithoutStream: p.PermitPingsWithoutStream}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: p.MaxConnectionIdle, Time: p.PingInterval, Timeout: p.PingTimeout}),
		grpc.MaxConcurrentStreams(p.MaxConcurrentStreams),
	}
}
