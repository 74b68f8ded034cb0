// Command sidecar-bench measures the sidecar: session GET/PUT through the
// sidecar against raw go-redis on the same bytes, near-cache hits, frame
// compression with and without the dictionary, and vector search recall and
// QPS against exact search. Every ratio is against a baseline measured in the
// same run. Run by hack/bench.d/30-sidecar.sh.
package main

import (
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
	sidecarBin := flag.String("sidecar-bin", "", "the sidecar binary (cmd/sidecar), also measured as its own process; empty skips those rows")
	flag.Parse()
	if *only == "" || *only == "sessions" {
		if err := benchSessions(*sidecarBin); err != nil {
			fmt.Fprintln(os.Stderr, "sessions:", err)
			os.Exit(1)
		}
	}
	if *only == "" || *only == "vectors" {
		sets := []struct {
			s *dataset.Set
			m vector.Metric
		}{
			{dataset.Clustered(7, *n, *q, 128, 100, 0.15), vector.L2},
			{dataset.EmbeddingLike(11, *n, *q, 128, 200, 12), vector.Cosine},
		}
		for _, st := range sets {
			if err := benchVectors(st.s, st.m, []int{4, 8, 16, 32}); err != nil {
				fmt.Fprintln(os.Stderr, "vectors:", err)
				os.Exit(1)
			}
		}
	}
}
