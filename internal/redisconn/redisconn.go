// Package redisconn holds the authentication and TLS settings every
// NeuroNetes Redis client shares (gateway, dispatcher and its tool proxy,
// sidecar): an ACL user, a password read from a file or the environment, and
// TLS with an optional CA bundle and client certificate. Each binary
// registers the same flags and applies them to its go-redis options.
package redisconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// PasswordEnv is the environment variable holding the Redis password when no
// password file is named.
const PasswordEnv = "NEURONETES_REDIS_PASSWORD"

// Flags are the connection settings of one Redis client.
type Flags struct {
	// Username is the Redis ACL user ("": the default user).
	Username string
	// PasswordFile holds the password; empty: $NEURONETES_REDIS_PASSWORD.
	PasswordFile string
	// TLS connects over TLS (1.2 or later).
	TLS bool
	// CAFile is a PEM bundle the server certificate must chain to (empty:
	// the system roots).
	CAFile string
	// CertFile and KeyFile are a client certificate for mutual TLS.
	CertFile, KeyFile string
	// ServerName overrides the name checked in the server certificate.
	ServerName string
}

// Register adds the flags (--redis-username, --redis-password-file,
// --redis-tls, --redis-ca-file, --redis-cert-file, --redis-key-file,
// --redis-server-name) to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Username, "redis-username", "", "Redis ACL user (empty: the default user)")
	fs.StringVar(&f.PasswordFile, "redis-password-file", "", "file holding the Redis password (default $"+PasswordEnv+")")
	fs.BoolVar(&f.TLS, "redis-tls", false, "connect to Redis over TLS")
	fs.StringVar(&f.CAFile, "redis-ca-file", "", "PEM CA bundle that verifies the Redis server certificate (with --redis-tls; empty: system roots)")
	fs.StringVar(&f.CertFile, "redis-cert-file", "", "client certificate for Redis mutual TLS (with --redis-key-file)")
	fs.StringVar(&f.KeyFile, "redis-key-file", "", "client key for Redis mutual TLS (with --redis-cert-file)")
	fs.StringVar(&f.ServerName, "redis-server-name", "", "name checked in the Redis server certificate (default: the host of the address)")
}

// Validate checks the flags without reading the files.
func (f *Flags) Validate() error {
	var errs []error
	if (f.CertFile == "") != (f.KeyFile == "") {
		errs = append(errs, errors.New("--redis-cert-file and --redis-key-file: set both or neither"))
	}
	if !f.TLS && (f.CAFile != "" || f.CertFile != "" || f.ServerName != "") {
		errs = append(errs, errors.New("--redis-ca-file, --redis-cert-file and --redis-server-name need --redis-tls"))
	}
	return errors.Join(errs...)
}

// Password returns the password: the file's content without its trailing
// line break, else $NEURONETES_REDIS_PASSWORD.
func (f *Flags) Password() (string, error) {
	if f.PasswordFile == "" {
		return os.Getenv(PasswordEnv), nil
	}
	b, err := os.ReadFile(f.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("--redis-password-file: %w", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// TLSConfig returns the TLS configuration, nil without --redis-tls.
func (f *Flags) TLSConfig() (*tls.Config, error) {
	if !f.TLS {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--redis-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--redis-ca-file %s: no PEM certificates", f.CAFile)
		}
		tc.RootCAs = pool
	}
	if f.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--redis-cert-file/--redis-key-file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Apply sets the user, password and TLS configuration on o.
func (f *Flags) Apply(o *redis.Options) error {
	if err := f.Validate(); err != nil {
		return err
	}
	pw, err := f.Password()
	if err != nil {
		return err
	}
	tc, err := f.TLSConfig()
	if err != nil {
		return err
	}
	o.Username, o.Password, o.TLSConfig = f.Username, pw, tc
	return nil
}
