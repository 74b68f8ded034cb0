// Package redistest starts a private, real redis-server for tests: bound to
// 127.0.0.1 (or a given address) on a free port, with its data in a temp dir,
// and stopped at test cleanup. Without redis-server, a test skips on a
// developer machine and fails under CI (internal/testreq).
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/internal/testreq"
)

// Server is a running (or stopped) redis-server owned by one test.
type Server struct {
	// Addr is host:port.
	Addr string
	// TLSAddr is host:port of the TLS listener (Options.TLSCertFile).
	TLSAddr string
	// Dir holds the server's data (AOF) files.
	Dir  string
	args []string
	aof  bool
	mu   sync.Mutex
	cmd  *exec.Cmd
}

// Options select how the server runs.
type Options struct {
	// Bind is the address to bind (default 127.0.0.1).
	Bind string
	// AOF enables appendonly with appendfsync always.
	AOF bool
	// ConfigFile runs the server with this redis.conf (ChartConfig: the
	// chart's own) instead of the AOF and save settings above; only the
	// port, bind address, data dir and log file are set on top of it.
	ConfigFile string
	// Args are further redis-server arguments (e.g. "--maxmemory", "2mb").
	Args []string
	// TLSCertFile and TLSKeyFile, when set, also serve TLS on TLSAddr
	// (client certificates not required).
	TLSCertFile, TLSKeyFile string
}

// ChartConfig returns the path of the chart's Redis configuration,
// deploy/helm/neuronetes/files/redis.conf, which the bundled Redis runs with.
func ChartConfig() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "helm", "neuronetes", "files", "redis.conf")
}

// Binary returns the redis-server path, or "" when it is not installed.
func Binary() string {
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return ""
	}
	return p
}

// Start starts a redis-server and registers its shutdown with t.Cleanup.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	if Binary() == "" {
		testreq.Tool(t, "redis-server", "not installed (hack/test-deps.d/20-redis.sh installs it)")
	}
	s, err := StartIn(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Kill() })
	return s
}

// StartIn starts a redis-server with its data in dir (for non-test
// programs such as benchmarks); the caller must Kill it.
func StartIn(dir string, o Options) (*Server, error) {
	if Binary() == "" {
		return nil, fmt.Errorf("redis-server not installed")
	}
	if o.Bind == "" {
		o.Bind = "127.0.0.1"
	}
	port, err := freePort(o.Bind)
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: net.JoinHostPort(o.Bind, strconv.Itoa(port)), Dir: dir, aof: o.AOF || o.ConfigFile != ""}
	if o.ConfigFile != "" {
		s.args = []string{o.ConfigFile}
	}
	s.args = append(s.args, "--port", strconv.Itoa(port), "--bind", o.Bind, "--dir", s.Dir,
		"--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning", "--logfile", s.Dir+"/redis.log")
	switch {
	case o.ConfigFile != "":
	case o.AOF:
		s.args = append(s.args, "--save", "", "--appendonly", "yes", "--appendfsync", "always")
	default:
		s.args = append(s.args, "--save", "", "--appendonly", "no")
	}
	if o.TLSCertFile != "" {
		tlsPort, err := freePort(o.Bind)
		if err != nil {
			return nil, err
		}
		s.TLSAddr = net.JoinHostPort(o.Bind, strconv.Itoa(tlsPort))
		s.args = append(s.args, "--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", o.TLSCertFile,
			"--tls-key-file", o.TLSKeyFile, "--tls-auth-clients", "no")
	}
	s.args = append(s.args, o.Args...)
	if err := s.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

func freePort(bind string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(bind, "0"))
	if err != nil {
		return 0, fmt.Errorf("free port on %s: %w", bind, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start (re)starts the server process with its original arguments and waits
// until it answers PING.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("redis %s already running", s.Addr)
	}
	cmd := exec.Command(Binary(), s.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.cmd = cmd
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		var reply redis.Error
		if err == nil || errors.As(err, &reply) { // NOAUTH: serving, with a password
			return nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(s.Dir + "/redis.log")
			return fmt.Errorf("redis-server on %s not ready: %v; log: %s", s.Addr, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Snapshot saves the dataset (SAVE) and returns the RDB file: a backup
// to give Restore later.
func (s *Server) Snapshot() ([]byte, error) {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	if err := c.Save(context.Background()).Err(); err != nil {
		return nil, fmt.Errorf("SAVE on %s: %w", s.Addr, err)
	}
	return os.ReadFile(filepath.Join(s.Dir, "dump.rdb"))
}

// Restore crashes the server (SIGKILL), replaces its data with snapshot (an
// RDB file from Snapshot) and starts it again: a Redis restored from an older
// backup. Only for servers started without AOF, which load the RDB file.
func (s *Server) Restore(snapshot []byte) error {
	if s.aof {
		return fmt.Errorf("restore of %s: the server runs with AOF, which it would load instead", s.Addr)
	}
	s.Kill()
	if err := os.WriteFile(filepath.Join(s.Dir, "dump.rdb"), snapshot, 0o600); err != nil {
		return fmt.Errorf("restore of %s: %w", s.Addr, err)
	}
	return s.Start()
}

// Kill stops the server with SIGKILL (a crash: only fsynced data survives).
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}
