package redisconn

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/internal/credurl"
	"github.com/neuronetes/neuronetes/internal/tlsdial"
)

// Dialer connects to a Redis server: for a URL a user chose, the egress
// policy's dialer (internal/egress).
type Dialer = tlsdial.Dialer

// ParseURL parses a Redis URL, "host:port" or redis:// or rediss:// (TLS),
// into client options; field names the setting in the error ("queueConfig.url"), which never
// shows the URL's password.
func ParseURL(field, url string) (*redis.Options, error) {
	if !strings.Contains(url, "://") {
		url = "redis://" + url
	}
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", field, credurl.Redact(url), credurl.Error(err, url))
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
		o.Dialer = tlsdial.DialTLS("redis", dial, o.TLSConfig)
	}
}
