// Package tlsdial puts a TLS client handshake on top of a dialer: the broker clients of a
// user-chosen URL (Redis, Kafka) connect through the egress policy's dialer, and a TLS URL must
// stay TLS over it.
package tlsdial

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
)

// Dialer opens a connection: for a URL a user chose, the egress policy's dialer
// (internal/egress).
type Dialer = func(ctx context.Context, network, addr string) (net.Conn, error)

// DialTLS returns dial with a TLS client handshake on top when cfg is set (dial itself when
// nil). The server name checked is cfg's, else the host dialed. what names the service in
// a handshake error ("redis", "kafka").
func DialTLS(what string, dial Dialer, cfg *tls.Config) Dialer {
	if cfg == nil {
		return dial
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		if c.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				c.ServerName = host
			}
		}
		conn := tls.Client(raw, c)
		if err := conn.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, fmt.Errorf("%s TLS handshake with %s: %w", what, addr, err)
		}
		return conn, nil
	}
}
