package redisconn

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Dialer connects to a Redis server: for a URL a user chose, the egress
// policy's dialer (internal/egress).
type Dialer = func(ctx context.Context, network, addr string) (net.Conn, error)

// ParseURL parses a Redis URL, "host:port" or redis:// or rediss:// (TLS),
// into client options; field names the setting in the error ("queueConfig.url").
func ParseURL(field, url string) (*redis.Options, error) {
	if !strings.Contains(url, "://") {
		url = "redis://" + url
	}
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", field, url, err)
	}
	return o, nil
}

// SetDialer makes o connect through dial (nil leaves go-redis' own dialer).
// go-redis applies o.TLSConfig only in its own dialer, so with a TLS
// configuration (a rediss:// URL, or one set before this call) the handshake
// is done here, over dial's connection: a custom dialer never turns a TLS URL
// into plaintext. Call it after every other change to o.TLSConfig.
func SetDialer(o *redis.Options, dial Dialer) {
	if dial != nil {
		o.Dialer = DialTLS(dial, o.TLSConfig)
	}
}

// DialTLS returns dial with a TLS client handshake on top when cfg is set
// (dial itself when nil). The server name checked is cfg's, else the host
// dialed.
func DialTLS(dial Dialer, cfg *tls.Config) Dialer {
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
			return nil, fmt.Errorf("redis TLS handshake with %s: %w", addr, err)
		}
		return conn, nil
	}
}
