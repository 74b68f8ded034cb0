package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/neuronetes/neuronetes/sidecar/vector"
	"github.com/neuronetes/neuronetes/sidecar/vector/dataset"
)

// recallAt returns |got ∩ want| / len(want).
func recallAt(got, want []vector.Result) float64 {
	set := make(map[string]bool, len(want))
	for _, r := range want {
		set[r.ID] = true
	}
	hit := 0
	for _, r := range got {
		if set[r.ID] {
			hit++
		}
	}
	return float64(hit) / float64(len(want))
}

// benchVectors builds an index over s and prints recall@10 and QPS per
// nprobe against exact search over the same index, measured in this run.
func benchVectors(s *dataset.Set, m vector.Metric, nprobes []int) error {
	x := vector.New(vector.Options{Seed: 42})
	items := make([]vector.Item, len(s.Data))
	for i, v := range s.Data {
		items[i] = vector.Item{ID: "v" + strconv.Itoa(i), Vec: v}
	}
	start := time.Now()
	if err := x.InsertBatch(items); err != nil {
		return err
	}
	build := time.Since(start)
	const k = 10
	exact := make([][]vector.Result, len(s.Queries))
	start = time.Now()
	for i, q := range s.Queries {
		r, err := x.Exact(q, k, m)
		if err != nil {
			return err
		}
		exact[i] = r
	}
	bruteQPS := float64(len(s.Queries)) / time.Since(start).Seconds()
	fmt.Printf("\nvector search: %s, %d x %d, metric %s, %d queries, %d lists, build %.1fs (k-means + assignment)\n",
		s.Name, len(s.Data), s.Dim, m, len(s.Queries), x.Lists(), build.Seconds())
	fmt.Printf("  %-12s %10s %10s %10s\n", "method", "recall@10", "QPS", "x brute")
	fmt.Printf("  %-12s %10.4f %10.0f %10.2f\n", "exact", 1.0, bruteQPS, 1.0)
	// Judged: the best recall among the nprobes at >= 10x brute force.
	best := 0.0
	for _, np := range nprobes {
		var rec float64
		start = time.Now()
		res := make([][]vector.Result, len(s.Queries))
		for i, q := range s.Queries {
			r, err := x.Search(q, k, m, np)
			if err != nil {
				return err
			}
			res[i] = r
		}
		qps := float64(len(s.Queries)) / time.Since(start).Seconds()
		for i := range res {
			rec += recallAt(res[i], exact[i])
		}
		rec /= float64(len(res))
		verdict := ""
		if rec >= 0.95 && qps >= 10*bruteQPS {
			verdict = "  meets target (recall>=0.95, >=10x)"
		}
		if qps >= 10*bruteQPS {
			best = max(best, rec)
		}
		fmt.Printf("  %-12s %10.4f %10.0f %10.2f%s\n", "ivf np="+strconv.Itoa(np), rec, qps, qps/bruteQPS, verdict)
	}
	judge(judgment{name: "vector recall@10 at >= 10x brute force, " + s.Name, value: best, limit: 0.95, atLeast: true})
	return nil
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
