package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// sidecarProc is the sidecar binary (cmd/sidecar) running as its own
// process, as it runs in an agent pod next to the agent's container.
type sidecarProc struct {
	url string
	cmd *exec.Cmd
}

// startSidecarProc starts bin on a free loopback port against redisAddr with
// the raw 32-byte key in a keys dir under dir, tenant namespace ns, a near
// cache of nearBytes (0: off) and GOMAXPROCS gomaxprocs (0: Go's default);
// it waits for /healthz.
func startSidecarProc(ctx context.Context, bin, dir, ns, redisAddr string, key []byte, nearBytes, gomaxprocs int) (*sidecarProc, error) {
	keysDir := filepath.Join(dir, "keys-"+ns)
	if err := os.MkdirAll(keysDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(keysDir, "k1"), key, 0o600); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.CommandContext(ctx, bin,
		"--http-addr", addr, "--unix-socket", "", "--grpc-addr", "",
		"--redis-addr", redisAddr, "--keys-dir", keysDir, "--namespace", ns,
		"--near-cache-bytes", strconv.Itoa(nearBytes), "--near-cache-max-age", "1h")
	cmd.Env = os.Environ()
	if gomaxprocs > 0 {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(gomaxprocs))
	}
	log, err := os.Create(filepath.Join(dir, "sidecar-"+ns+".log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &sidecarProc{url: "http://" + addr, cmd: cmd}
	for deadline := time.Now().Add(15 * time.Second); ; {
		resp, err := http.Get(p.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			p.stop()
			b, _ := os.ReadFile(filepath.Join(dir, "sidecar-"+ns+".log"))
			return nil, fmt.Errorf("sidecar process on %s not healthy after 15 s: %v; log: %s", addr, err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *sidecarProc) stop() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}
