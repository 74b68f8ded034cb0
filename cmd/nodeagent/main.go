// Command nodeagent runs on every GPU node (second container of the driver's DaemonSet). It prewarms
// Model weights into a node-local content-addressed cache and the page cache, labels the node for each
// warm model, reports per-node progress in Model status, and serves a local API on a unix socket.
//
// Subcommands besides the daemon (default "run") support the benchmark in hack/bench.d/25-prewarm.sh:
//
//	nodeagent warm [-method populate|pread] [-parallel N] FILE   warm FILE into the page cache
//	nodeagent read-weights FILE                                  read FILE like the demo agent does
//	nodeagent resident FILE                                      print the resident fraction (mincore)
//	nodeagent wait-weights [-timeout D] [-dir] PATH...           wait until each FILE exists, or each DIR holds one (a pod's init
//	                                                             container: agent.WeightsWaitContainer)
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/neuronetes/neuronetes/nodeagent/warm"
)

func main() {
	args := os.Args[1:]
	cmd := "run"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "run":
		err = run(args)
	case "warm":
		err = warmCmd(args)
	case "read-weights":
		err = readCmd(args)
	case "resident":
		err = residentCmd(args)
	case "wait-weights":
		err = waitWeightsCmd(args)
	default:
		err = fmt.Errorf("unknown subcommand %q (want run, warm, read-weights, resident or wait-weights)", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodeagent:", err)
		os.Exit(1)
	}
}

// warmCmd warms one file and prints "bytes seconds method".
func warmCmd(args []string) error {
	fs := flag.NewFlagSet("warm", flag.ExitOnError)
	method := fs.String("method", string(warm.MethodPopulate), "populate (MADV_POPULATE_READ) or pread")
	parallel := fs.Int("parallel", 4, "workers")
	chunk := fs.Int64("chunk-bytes", 32<<20, "bytes per worker step")
	fs.Parse(args)
	if fs.NArg() != 1 {
		return fmt.Errorf("warm: want one FILE")
	}
	res, err := warm.Warm(context.Background(), fs.Arg(0), warm.Options{Method: warm.Method(*method), Parallel: *parallel, ChunkBytes: *chunk})
	if err != nil {
		return err
	}
	fmt.Printf("%d %.6f %s\n", res.Bytes, res.Duration.Seconds(), res.Method)
	return nil
}

// readCmd reads a file sequentially with a 4 MiB buffer, as cmd/demo-agent reads its weights at start,
// and prints "bytes seconds".
func readCmd(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("read-weights: want one FILE")
	}
	start := time.Now()
	f, err := os.Open(args[0])
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.CopyBuffer(io.Discard, f, make([]byte, 4<<20))
	if err != nil {
		return err
	}
	fmt.Printf("%d %.6f\n", n, time.Since(start).Seconds())
	return nil
}

// residentCmd prints "resident size fraction".
func residentCmd(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("resident: want one FILE")
	}
	r, n, err := warm.Resident(args[0])
	if err != nil {
		return err
	}
	frac := 0.0
	if n > 0 {
		frac = float64(r) / float64(n)
	}
	fmt.Printf("%d %d %.4f\n", r, n, frac)
	return nil
}
