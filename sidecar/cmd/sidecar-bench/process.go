package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// sidecarProc is the sidecar binary (cmd/sidecar) running as its own
// process, as it runs in an agent pod next to the agent's container: HTTP
// on loopback TCP and on a unix socket, gRPC on loopback TCP.
type sidecarProc struct {
	url, sock, grpcAddr string
	cmd                 *exec.Cmd
}

// procOptions select how a sidecar process runs.
type procOptions struct {
	// ns is the tenant (namespace); each process gets its own.
	ns string
	// nearBytes is the near cache's budget (0: off).
	nearBytes int
	// compression is --compression ("": the sidecar's default).
	compression string
}

// startSidecarProc starts bin against redisAddr with the raw 32-byte key in
// a keys dir under dir and GOMAXPROCS=2 (as the webhook injects it), and
// waits for /healthz.
func startSidecarProc(ctx context.Context, bin, dir, redisAddr string, key []byte, o procOptions) (*sidecarProc, error) {
	keysDir := filepath.Join(dir, "keys-"+o.ns)
	if err := os.MkdirAll(keysDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(keysDir, "k1"), key, 0o600); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	grpcAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, o.ns+".sock")
	args := []string{"--http-addr", addr, "--unix-socket", sock, "--grpc-addr", grpcAddr,
		"--redis-addr", redisAddr, "--keys-dir", keysDir, "--namespace", o.ns,
		"--near-cache-bytes", strconv.Itoa(o.nearBytes), "--near-cache-max-age", "1h"}
	if o.compression != "" {
		args = append(args, "--compression", o.compression)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	logPath := filepath.Join(dir, "sidecar-"+o.ns+".log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &sidecarProc{url: "http://" + addr, sock: sock, grpcAddr: grpcAddr, cmd: cmd}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(p.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			p.stop()
			b, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("sidecar process %s on %s not healthy after 15 s: %v; log: %s", o.ns, addr, err, b)
		}
	}
}

func (p *sidecarProc) stop() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// checkNearHits reads the near-cache counters of p's /metrics: its GET rows
// count as near-cache hits only if (nearly) every lookup hit.
func checkNearHits(p *sidecarProc) error {
	resp, err := http.Get(p.url + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	count := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		for _, r := range []string{"hit", "miss"} {
			if v, ok := strings.CutPrefix(line, `neuronetes_sidecar_near_cache_requests_total{result="`+r+`"} `); ok {
				count[r], _ = strconv.ParseFloat(v, 64)
			}
		}
	}
	total := count["hit"] + count["miss"]
	fmt.Printf("  near-cache process: %.0f of %.0f lookups hit\n", count["hit"], total)
	if total == 0 || count["hit"] < 0.99*total {
		return fmt.Errorf("the near-cache rows did not hit the near cache (%.0f of %.0f lookups)", count["hit"], total)
	}
	return nil
}
