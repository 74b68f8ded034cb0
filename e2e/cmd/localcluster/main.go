// Command localcluster brings the local real Kubernetes cluster up or down,
// reports its status, and builds the project's images into it.
//
//	localcluster up [--kwok-nodes N] [--real-nodes 1|2]
//	                                   start (idempotent) and print a summary; --real-nodes 2
//	                                   (default: $NEURONETES_E2E_REAL_NODES, else 1) adds the
//	                                   second real node
//	localcluster images [names...]     build cmd/<name> images and import them (into both
//	                                   real nodes when the second runs); the name
//	                                   neuronetes-scheduler builds hack/tools/scheduler
//	localcluster down                  stop everything and restore the host
//	localcluster status                exit 0 when running
//	localcluster nvidia-images         import the nvidia-smi stand-in under NVIDIA's image names
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/neuronetes/neuronetes/e2e/cluster"
	"github.com/neuronetes/neuronetes/e2e/images"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	root := fs.String("root", ".", "repository root (state goes to ROOT/.local)")
	kwok := fs.Int("kwok-nodes", 0, "number of kwok nodes to create")
	envNodes, err := cluster.RealNodesFromEnv()
	if err != nil {
		fail(err)
	}
	realNodes := fs.Int("real-nodes", envNodes, "number of real kubelet nodes (1 or 2; default $"+cluster.RealNodesEnv+", else 1)")
	_ = fs.Parse(os.Args[2:])
	if *realNodes < 1 || *realNodes > 2 {
		fail(fmt.Errorf("--real-nodes=%d: want 1 or 2", *realNodes))
	}
	abs, err := filepath.Abs(*root)
	if err != nil {
		fail(err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	logf := func(format string, args ...any) { fmt.Printf("[localcluster] "+format+"\n", args...) }

	switch os.Args[1] {
	case "up":
		start := time.Now()
		c, err := cluster.Up(ctx, cluster.Options{Root: abs, KwokNodes: *kwok, RealNodes: *realNodes, Logf: logf})
		if err != nil {
			fail(err)
		}
		logf("cluster up in %s; kubeconfig %s", time.Since(start).Round(100*time.Millisecond), c.Kubeconfig)
		logf("try: %s --kubeconfig %s get nodes", filepath.Join(c.Paths.Bin, "kubectl"), c.Kubeconfig)
	case "down":
		if err := cluster.Down(ctx, abs, logf); err != nil {
			fail(err)
		}
		logf("cluster down; nothing left behind")
	case "status":
		c, err := cluster.Attach(abs)
		if err != nil {
			fail(err)
		}
		logf("running; kubeconfig %s", c.Kubeconfig)
	case "images":
		var specs []images.Spec
		for _, n := range fs.Args() {
			specs = append(specs, images.CommandSpec(abs, n))
		}
		if len(specs) == 0 {
			if specs, err = images.Commands(abs); err != nil {
				fail(err)
			}
		}
		p := cluster.NewPaths(abs)
		for _, spec := range specs {
			start := time.Now()
			ref, err := images.BuildAndImport(ctx, spec, filepath.Join(p.Local, "images"), p.Binary("ctr"), p.ContainerdSocket())
			if err != nil {
				fail(err)
			}
			if cluster.SecondNodeRunning(abs) {
				if err := images.Import(ctx, p.Binary("ctr"), cluster.SecondNodeSocket(abs), filepath.Join(p.Local, "images", spec.Name+".tar")); err != nil {
					fail(err)
				}
			}
			logf("image %s imported in %s", ref, time.Since(start).Round(100*time.Millisecond))
		}
	case "nvidia-images":
		p := cluster.NewPaths(abs)
		if err := images.ImportNVSMI(ctx, abs, filepath.Join(p.Local, "images"), p.Binary("ctr"), p.ContainerdSocket()); err != nil {
			fail(err)
		}
		logf("nvidia-smi stand-in imported as %v", images.NVIDIAImageNames)
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: localcluster up|down|status|images|nvidia-images [--root DIR] [--kwok-nodes N] [names...]")
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "localcluster: %v\n", err)
	os.Exit(1)
}
