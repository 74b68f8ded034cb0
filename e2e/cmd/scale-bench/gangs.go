package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/neuronetes/neuronetes/e2e/cluster"
	"github.com/neuronetes/neuronetes/e2e/scale"
)

// mainGangs runs the gang benchmark and prints its verdicts last; it returns the exit code: 1
// when a node count misses the target or the run did not complete.
func mainGangs(ctx context.Context, o options) int {
	var lines []string
	code, _, err := run(ctx, o, os.Stdout, &lines)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale-bench:", err)
		code = 1
	}
	for _, l := range lines {
		fmt.Println(l)
	}
	switch {
	case err != nil:
		fmt.Println("gang bench: VERDICT: FAIL: the run did not complete:", err)
	case code != 0:
		fmt.Println("gang bench: VERDICT: FAIL: gangs bound in part, GPUs stranded or gangs left pending that fit (lines above)")
	default:
		fmt.Printf("gang bench: VERDICT: PASS: at %v nodes, 0 gangs bound in part, 0 GPUs stranded, 0 pending gangs that fit\n", o.nodes)
	}
	return code
}

// runGangs runs scale.RunGangs at each node count on fresh nodes of this run and appends one
// verdict line per count.
func runGangs(ctx context.Context, o options, out io.Writer, cs kubernetes.Interface, scraper *scale.Scraper, runID string, classes map[string]string, lines *[]string) (int, error) {
	code := 0
	fmt.Fprintf(out, "gang bench: run %s, gpu profile %s (8 GPUs/node), gang shapes %v, overcommit %.2fx, %d single pods as the baseline\n",
		runID, o.gpuProfile, scale.GangShapes, o.gangOvercommit, o.gangSingles)
	for _, n := range o.nodes {
		start := time.Now()
		nodes, err := scale.CreateNodes(ctx, cs, runID, scale.NodePrefix, 0, n, 5*time.Minute)
		if err != nil {
			return 1, err
		}
		fmt.Fprintf(out, "\ngang bench: %d kwok nodes Ready in %s\n", n, time.Since(start).Round(time.Millisecond))
		ns := fmt.Sprintf("gangs-%s-%d", runID, n)
		res, runErr := scale.RunGangs(ctx, scale.GangConfig{
			Client: cs, Scraper: scraper, RunID: runID, Nodes: nodes, GPUProfile: o.gpuProfile, Image: cluster.PauseImage,
			Classes: classes, Singles: o.gangSingles, Overcommit: o.gangOvercommit, Timeout: o.phaseTimeout, Settle: o.gangSettle,
		}, ns)
		line, ok := scale.WriteGangs(out, res)
		if runErr != nil {
			return 1, fmt.Errorf("gangs at %d nodes: %w", n, runErr)
		}
		*lines = append(*lines, line)
		if !ok {
			code = 1
		}
		for _, suffix := range []string{"-single", "-gang"} {
			if err := scale.DeleteNamespace(ctx, cs, ns+suffix); err != nil {
				return 1, err
			}
		}
		if err := scale.DeleteSlices(ctx, cs, scale.LabelRun+"="+runID); err != nil {
			return 1, err
		}
	}
	return code, nil
}
