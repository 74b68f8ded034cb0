package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// The echo server is the floor under any sidecar that runs as its own
// process: the same HTTP engine as the sidecar (fasthttp) in a process of
// its own on loopback, answering as the sidecar does but from memory (GET:
// the session's bytes with an ETag; PUT: reads the body, answers
// {"version":N}), with no Redis and no codec. The bench runs this same
// binary with -echo-server.

// serveEcho runs the echo server on tcpAddr and unixPath with body as the
// GET answer until the process is killed.
func serveEcho(tcpAddr, unixPath string, bodyBytes int) error {
	body := chatJSON(1, bodyBytes)
	var version atomic.Int64
	s := &fasthttp.Server{Handler: func(c *fasthttp.RequestCtx) {
		if c.IsGet() {
			c.Response.Header.Set("ETag", "7")
			c.SetContentType("application/json")
			c.Response.SetBodyRaw(body)
			return
		}
		_ = c.PostBody()
		v := strconv.FormatInt(version.Add(1), 10)
		c.Response.Header.Set("ETag", v)
		c.SetContentType("application/json")
		c.SetBodyString(`{"version":` + v + "}\n")
	}}
	errc := make(chan error, 2)
	for _, l := range []struct{ network, addr string }{{"tcp", tcpAddr}, {"unix", unixPath}} {
		ln, err := net.Listen(l.network, l.addr)
		if err != nil {
			return err
		}
		go func() { errc <- s.Serve(ln) }()
	}
	return <-errc
}

// echoProc is the echo server running as its own process.
type echoProc struct {
	url, sock string
	cmd       *exec.Cmd
}

// startEcho starts this binary as the echo server with GOMAXPROCS=2 (as
// the sidecar runs), answering GETs with a bodyBytes session, and waits
// until it answers.
func startEcho(ctx context.Context, dir string, bodyBytes int) (*echoProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "echo.sock")
	cmd := exec.CommandContext(ctx, self, "-echo-server", "-echo-addr", addr, "-echo-unix", sock, "-echo-bytes", strconv.Itoa(bodyBytes))
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start echo server: %w", err)
	}
	p := &echoProc{url: "http://" + addr, sock: sock, cmd: cmd}
	c := &fasthttp.Client{}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, _, err := c.Get(nil, p.url+"/v1/sessions/x")
		if _, serr := os.Stat(sock); err == nil && code == 200 && serr == nil {
			return p, nil
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("echo server on %s not answering after 10 s: %v", addr, err)
		}
	}
}

func (p *echoProc) stop() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// freeAddr returns a free loopback TCP address.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
