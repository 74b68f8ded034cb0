// Command sidecar-bench measures the sidecar against baselines taken in the
// same run and prints a verdict last: session GET/PUT through the sidecar
// binary as its own process against the out-of-process floor (raw go-redis
// plus the same-size loopback echo through a minimal server in its own
// process), over TCP and the unix socket; the levers of PUT; frame sizes
// and seal times per codec; vector search recall and QPS against exact
// search. It exits 1 when a target is missed, 2 when the run failed. Run by
// hack/bench.d/30-sidecar.sh.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/neuronetes/neuronetes/sidecar/vector"
	"github.com/neuronetes/neuronetes/sidecar/vector/dataset"
)

func main() {
	n := flag.Int("vectors", envInt("NN_BENCH_VECTORS", 100000), "vectors per data set")
	q := flag.Int("queries", envInt("NN_BENCH_QUERIES", 500), "queries per data set")
	only := flag.String("only", "", "run only: sessions, vectors")
	sidecarBin := flag.String("sidecar-bin", "", "the sidecar binary (cmd/sidecar), measured as its own process (required for sessions)")
	echo := flag.Bool("echo-server", false, "run as the echo server (the bench starts itself so)")
	echoAddr := flag.String("echo-addr", "", "echo server: TCP address")
	echoUnix := flag.String("echo-unix", "", "echo server: unix socket path")
	echoBytes := flag.Int("echo-bytes", 16<<10, "echo server: size of the session it answers GETs with")
	flag.Parse()
	if *echo {
		if err := serveEcho(*echoAddr, *echoUnix, *echoBytes); err != nil {
			fmt.Fprintln(os.Stderr, "echo server:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*only, *sidecarBin, *n, *q); err != nil {
		fmt.Printf("verdict: NOT MEASURED: %v\n", err)
		os.Exit(2)
	}
	if err := printVerdict(); errors.Is(err, errMissed) {
		os.Exit(1)
	}
}

func run(only, sidecarBin string, n, q int) error {
	if only == "" || only == "sessions" {
		if err := benchSessions(sidecarBin); err != nil {
			return fmt.Errorf("sessions: %w", err)
		}
	}
	if only == "" || only == "vectors" {
		sets := []struct {
			s *dataset.Set
			m vector.Metric
		}{
			{dataset.Clustered(7, n, q, 128, 100, 0.15), vector.L2},
			{dataset.EmbeddingLike(11, n, q, 128, 200, 12), vector.Cosine},
		}
		for _, st := range sets {
			if err := benchVectors(st.s, st.m, []int{4, 8, 16, 32}); err != nil {
				return fmt.Errorf("vectors: %w", err)
			}
		}
	}
	return nil
}
