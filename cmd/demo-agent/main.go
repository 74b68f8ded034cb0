// Command demo-agent is an OpenAI-compatible mock model server for NeuroNetes demos and e2e
// tests. It streams tokens at a configurable rate with a TTFT that grows with the queue and the
// context length, exports vLLM's metric names plus the seed's neuronetes_* names, reads a weights
// file at start (to show warm versus cold loading), and keeps session memory in the NeuroNetes
// sidecar when NEURONETES_SIDECAR_URL is set.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if err := run(); err != nil {
		log.Fatalf("demo-agent: %v", err)
	}
}

// loadWeights reads the whole file and returns bytes read and the time it took.
func loadWeights(path string) (int64, time.Duration, error) {
	start := time.Now()
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("open weights: %w", err)
	}
	defer f.Close()
	n, err := io.CopyBuffer(io.Discard, f, make([]byte, 4<<20))
	if err != nil {
		return n, 0, fmt.Errorf("read weights %s: %w", path, err)
	}
	return n, time.Since(start), nil
}

func run() error {
	var (
		listen     = flag.String("listen", ":8000", "HTTP listen address")
		model      = flag.String("model", "demo-model", "model name reported by the API and metrics")
		class      = flag.String("agent-class", os.Getenv("NEURONETES_AGENT_CLASS"), "agent class label of the metrics")
		tokenRate  = flag.Float64("token-rate", 50, "generated tokens per second per request")
		ttftBase   = flag.Duration("ttft-base", 50*time.Millisecond, "TTFT with an empty queue and no context")
		ttftQueued = flag.Duration("ttft-per-queued", 20*time.Millisecond, "TTFT added per queued request ahead")
		ttft1k     = flag.Duration("ttft-per-1k-context", 10*time.Millisecond, "TTFT added per 1000 context tokens")
		maxRunning = flag.Int("max-running", 4, "requests generating at once; more are queued")
		weights    = flag.String("weights", os.Getenv("NEURONETES_WEIGHTS_PATH"), "weights file read fully at start (optional)")
		readyDelay = flag.Duration("ready-delay", 0, "extra simulated load time before /readyz succeeds")
		sidecarURL = flag.String("sidecar-url", os.Getenv("NEURONETES_SIDECAR_URL"), "sidecar base URL; empty disables session memory")
		drain      = flag.Duration("drain-timeout", 25*time.Second, "time open streams get to finish after SIGTERM")
	)
	flag.Parse()

	m := newAgentMetrics(*model, *class)
	s := &server{
		eng: newEngine(engineConfig{tokenRate: *tokenRate, ttftBase: *ttftBase, ttftPerQueued: *ttftQueued,
			ttftPer1kTokens: *ttft1k, maxRunning: *maxRunning}, m),
		m: m, model: *model,
	}
	if *sidecarURL != "" {
		s.sidecar = newSidecarClient(*sidecarURL, m)
	}
	srv := &http.Server{Addr: *listen, Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Printf("demo-agent listening on %s (model %s, sidecar %q)", *listen, *model, *sidecarURL)

	go func() {
		if *weights != "" {
			n, d, err := loadWeights(*weights)
			if err != nil {
				errc <- err
				return
			}
			m.weightsLoadS.Set(d.Seconds())
			log.Printf("weights loaded: %d bytes in %s (%.1f MiB/s)", n, d, float64(n)/(1<<20)/max(d.Seconds(), 1e-9))
		}
		time.Sleep(*readyDelay)
		s.ready.Store(true)
		log.Printf("ready")
	}()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case got := <-sig:
		log.Printf("%s: draining open requests for up to %s", got, *drain)
		s.ready.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), *drain)
		defer cancel()
		return srv.Shutdown(ctx)
	}
}
